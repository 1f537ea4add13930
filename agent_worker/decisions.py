"""A decision as a person made it, before the client binds it to the request it decides.

``Decision`` is what the CLI, the inbox and the HTTP API each build from their own input (flags, a
form, a JSON body), and what ``AgentWorkerClient.submit`` reads the request for, builds into an
``ApprovalDecision``, signs and sends: one path, at most one read and the update. What depends on the
request (the version a person left out, an edit compared with the proposed arguments, a form
question's typed answer) is resolved by ``Decision.build`` once the request is known.

Like ``agent_worker.client``, this module imports no workflow, agent, sandbox or store code, and
builds the payload models only when a decision is built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from agent_worker.errors import AgentWorkerError

if TYPE_CHECKING:
    from agent_worker.schemas.approvals import ApprovalDecision, ApprovalRequest

__all__ = ["Decision", "EditGiven", "InvalidDecision", "changed_arguments"]

EditGiven = Literal["as_sent", "changes", "whole"]
"""How ``Decision.edited_args`` was given: sent as it is (the CLI's ``--args``); the arguments to
change, merged over the proposed ones (the API's body); or the whole argument object, compared with
the proposed one (the inbox's form). The last two send only what changed, and refuse an edit that
adds or removes an argument or changes none."""


class InvalidDecision(AgentWorkerError):
    """Raised when a decision cannot be built: a field the payload model refuses (named), an edit that
    changes nothing or adds an argument, an answer that is not JSON where JSON is needed. Nothing was
    sent."""


@dataclass(frozen=True)
class Decision:
    """One person's decision on one request, in the caller's terms.

    Args:
        request_id: the request decided.
        kind: ``approve``, ``edit``, ``reject``, ``respond`` or ``answer``.
        principal: who decides.
        version: the request version reviewed; None takes the pending request's (read first).
        reason: why; for a rejection or a respond, the message the model reads.
        edited_args: with an edit, the arguments, as ``edit_given`` says.
        edit_given: how ``edited_args`` was given (``EditGiven``).
        answer: with an answer, its value (a JSON value); with ``answer_typed``, the text typed.
        answer_typed: ``answer`` is text as a person typed it: for a form question, JSON to parse.
        remember: with an approve, the grant to remember (``schemas.grants.Remember`` as JSON).
    """

    request_id: str
    kind: str
    principal: str
    version: str | None = None
    reason: str | None = None
    edited_args: dict[str, Any] | None = None
    edit_given: EditGiven = "as_sent"
    answer: Any = None
    answer_typed: bool = False
    remember: dict[str, Any] | None = None

    @property
    def needs_request(self) -> bool:
        """Whether building it needs the pending request (read before sending)."""
        return (
            self.version is None
            or (self.kind == "edit" and self.edit_given != "as_sent")
            or (self.kind == "answer" and self.answer_typed)
        )

    def build(
        self, request: ApprovalRequest | None = None, *, expires_at: datetime | None = None
    ) -> ApprovalDecision:
        """The ``ApprovalDecision`` to send: bound to ``request`` (its version when none was given),
        with ``expires_at`` when sent by update.

        Raises:
            InvalidDecision: the payload model refuses a field (named), or the edit or answer does not
                fit the request.
        """
        from agent_worker.schemas.validation import InvalidPayload, parse_decision

        version = self.version if self.version is not None else (request.version if request else "")
        raw: dict[str, Any] = {
            "request_id": self.request_id,
            "version": version,
            "decision": self.kind,
            "principal": self.principal,
            "reason": self.reason,
            "remember": self.remember,
            "expires_at": expires_at,
        }
        if self.kind == "edit" or self.edited_args is not None:
            raw["edited_args"] = self._edited(request)
        if self.answer is not None:
            raw["answer"] = self._answer(request)
        try:
            return parse_decision({k: v for k, v in raw.items() if v is not None})
        except InvalidPayload as err:
            raise InvalidDecision(str(err)) from None

    def _edited(self, request: ApprovalRequest | None) -> dict[str, Any] | None:
        if self.edit_given == "as_sent" or self.edited_args is None or request is None:
            return self.edited_args
        proposed = request.action.arguments
        submitted = self.edited_args
        if self.edit_given == "changes":
            submitted = {**proposed, **submitted}
        return changed_arguments(proposed, submitted)

    def _answer(self, request: ApprovalRequest | None) -> Any:
        if not self.answer_typed:
            return self.answer
        from agent_worker.schemas.questions import AnswerType, Question

        question = request.action.operation if request else None
        text = str(self.answer)
        if not (isinstance(question, Question) and question.answer_type is AnswerType.FORM):
            if not text.strip():
                raise InvalidDecision("an answer is required")
            return text
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise InvalidDecision(
                f"the answer is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
            ) from None


def changed_arguments(proposed: dict[str, Any], submitted: dict[str, Any]) -> dict[str, Any]:
    """The arguments an edit changes: ``submitted`` (the whole argument object) against ``proposed``.

    Raises:
        InvalidDecision: an argument removed or added, or nothing changed.
    """
    removed = sorted(set(proposed) - set(submitted))
    added = sorted(set(submitted) - set(proposed))
    if removed or added:
        parts = [
            f"removed {', '.join(removed)}" if removed else "",
            f"added {', '.join(added)}" if added else "",
        ]
        raise InvalidDecision(
            f"an edit can change arguments, not add or remove them ({'; '.join(p for p in parts if p)})"
        )
    changed = {k: v for k, v in submitted.items() if proposed[k] != v}
    if not changed:
        raise InvalidDecision("the edit changes no argument; approve instead")
    return changed
