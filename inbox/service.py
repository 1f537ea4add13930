"""What the inbox asks Temporal, and what it sends back.

Every check that guards a decision lives here, so the HTTP layer cannot forget one:

- **Listing**: ``AgentWorkerClient.awaiting``: tasks come from visibility (``AgentAwaitingApproval``
  and ``AgentApprovers``), and each task's pending requests from its status query. A principal sees
  only the requests that name them as an approver.
- **Viewing a task**: allowed to the approvers its policy names (any rule's ``approvers`` and
  ``default_approvers``) and to the approvers of its pending requests. The policy comes from the
  task's start input in history, so a closed task stays visible to its approvers without a worker.
- **Deciding**: before anything is sent, the request must be pending and name the principal; then
  the decision goes out through ``AgentWorkerClient.send_decision`` as the update ``decide`` (the
  workflow checks everything again and answers synchronously). Where the policy registers the
  principal's key, or requires signatures, the inbox signs with the principal's private key from its
  keys directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_worker.schemas.actions import ProposedAction
from agent_worker.schemas.approvals import ApprovalDecision, ApprovalRequest, DecisionKind, DecisionOutcome
from agent_worker.schemas.tasks import PolicySpec, TaskResult, TaskSpec, TaskStatus
from agent_worker.schemas.validation import InvalidPayload, parse_decision, parse_task_input
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from agent_worker.client import (
    AgentWorkerClient,
    AgentWorkerError,
    AwaitingTask,
    DecisionRefused,
    WorkerUnreachable,
)

if TYPE_CHECKING:
    from agent_worker.activities.artifacts import ArtifactStore

QUERY_TIMEOUT = timedelta(seconds=5)
# How long a decision waits for a worker's answer; it expires then (``ApprovalDecision.expires_at``).
DECIDE_TIMEOUT = timedelta(seconds=30)
PREVIEW_BYTES = 64 * 1024


class InboxError(Exception):
    """A request the inbox refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


InboxEntry = AwaitingTask
"""A task in a principal's inbox, with the requests that principal may decide."""


@dataclass
class ArtifactPreview:
    """An artifact an action refers to, as far as the inbox can show it."""

    digest: str
    text: str | None = None
    size: int | None = None
    truncated: bool = False
    problem: str | None = None


@dataclass
class TaskView:
    """A task as one approver may see it."""

    task_id: str
    running: bool
    status: TaskStatus | None = None
    result: TaskResult | None = None
    closed_as: str | None = None  # the execution status when the result cannot be read
    decidable: list[ApprovalRequest] = field(default_factory=list)
    others_pending: int = 0
    problem: str | None = None


def may_view(policy: PolicySpec, principal: str) -> bool:
    """Whether ``principal`` is one of the approvers the task's policy names."""
    approvers = {a for rule in policy.rules for a in rule.approvers} | set(policy.default_approvers)
    return principal in approvers


class InboxService:
    """The inbox's view of the Temporal cluster.

    Args:
        client: a connected client (its data converter decodes the task payloads).
        keys_dir: where principals' Ed25519 private keys live (``<principal>.key``).
        artifact_dir: a local artifact store's directory to read previews from (the embedded
            default), or None when not reachable here.
        artifact_store: the artifact store to read previews from (``build_artifact_store(config)``);
            it takes precedence over ``artifact_dir``.
    """

    def __init__(
        self,
        client: Client,
        keys_dir: Path,
        artifact_dir: Path | None = None,
        artifact_store: ArtifactStore | None = None,
    ) -> None:
        self.client = client
        self.tasks = AgentWorkerClient(client)
        self.keys_dir = keys_dir
        if artifact_store is None and artifact_dir is not None:
            from agent_worker.activities.artifacts import LocalArtifactStore

            artifact_store = LocalArtifactStore(artifact_dir)
        self.artifact_store = artifact_store

    # ---- reading ---------------------------------------------------------------------------------

    async def inbox(self, principal: str) -> list[InboxEntry]:
        """Every running task with a request ``principal`` may decide."""
        return await self.tasks.awaiting(principal=principal, wait_seconds=QUERY_TIMEOUT.total_seconds())

    async def task(self, task_id: str, principal: str) -> TaskView:
        """The task as ``principal`` may see it.

        Raises:
            InboxError: (404) no such task, or one ``principal`` may not see (the same answer, so
                the inbox does not tell strangers which task ids exist).
        """
        handle = self.client.get_workflow_handle(task_id, result_type=TaskResult)
        not_found = InboxError(f"no task {task_id!r} among the tasks {principal!r} may see", 404)
        try:
            description = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise not_found from None
            raise
        policy = await self.policy(handle)
        running = description.status is WorkflowExecutionStatus.RUNNING
        view = TaskView(task_id=task_id, running=running)
        if running:
            try:
                view.status = await self._status(handle)
            except Exception as err:  # a dead worker: say so rather than fail the page
                view.problem = f"its worker did not answer the status query ({err})"
        if view.status is not None:
            view.decidable = [r for r in view.status.pending if principal in r.approvers]
            view.others_pending = len(view.status.pending) - len(view.decidable)
        if not view.decidable and (policy is None or not may_view(policy, principal)):
            raise not_found
        if not running:
            try:
                view.result = await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
            except WorkflowFailureError as err:
                view.closed_as = description.status.name.lower() if description.status else "closed"
                view.problem = str(err.cause or err)
            except RPCError as err:
                view.problem = f"its result cannot be read: {err.message}"
        return view

    async def policy(self, handle: WorkflowHandle[Any, Any]) -> PolicySpec | None:
        """The task's policy, from the start event of its latest run (None when it cannot be read).

        Read each time rather than cached by task id: a closed task's id may be reused by a new
        task with another policy.
        """
        spec = await self.spec(handle)
        return spec.policy if spec is not None else None

    async def spec(self, handle: WorkflowHandle[Any, Any]) -> TaskSpec | None:
        """The task's spec, from the start event of its latest run (None when it cannot be read)."""
        async for event in handle.fetch_history_events(page_size=1, rpc_timeout=QUERY_TIMEOUT):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            if not payloads:
                return None
            [raw] = await self.client.data_converter.decode(list(payloads)[:1])
            try:
                return parse_task_input(raw).spec
            except InvalidPayload:
                return None  # the task itself failed on this input; nobody can approve anything
        return None

    def previews(self, action: ProposedAction) -> list[ArtifactPreview]:
        """The artifacts an action refers to, read from the artifact store when it is reachable."""
        digests = list(getattr(action.operation, "artifacts", []))
        return [self._preview(d) for d in digests]

    def _preview(self, digest: str) -> ArtifactPreview:
        from agent_worker.activities.artifacts import LocalArtifactStore
        from agent_worker.activities.errors import ArtifactError

        store = self.artifact_store
        if store is None or (isinstance(store, LocalArtifactStore) and not store.root.is_dir()):
            where = store.root if isinstance(store, LocalArtifactStore) else "(none configured)"
            return ArtifactPreview(digest, problem=f"the artifact store is not reachable here: {where}")
        try:
            data = store.get(digest)
        except ArtifactError as err:
            return ArtifactPreview(digest, problem=str(err))
        try:
            text = data[:PREVIEW_BYTES].decode("utf-8")
        except UnicodeDecodeError:
            return ArtifactPreview(digest, size=len(data), problem="binary content; no preview")
        return ArtifactPreview(digest, text=text, size=len(data), truncated=len(data) > PREVIEW_BYTES)

    async def _status(self, handle: WorkflowHandle[Any, Any]) -> TaskStatus:
        return await handle.query(AgentTaskWorkflow.status, rpc_timeout=QUERY_TIMEOUT)

    # ---- deciding --------------------------------------------------------------------------------

    async def decide(self, task_id: str, principal: str, form: dict[str, str]) -> DecisionOutcome:
        """Check and send ``principal``'s decision from a submitted form.

        The form has ``request_id``, ``version``, ``decision`` (approve / edit / reject / respond /
        answer), and ``reason``, ``edited_args`` (a JSON object; only changed arguments are sent),
        ``remember`` (a JSON object, with an approve) and the answer (``answer_json``, a JSON value, or
        ``answer``: text, parsed as JSON for a form) as needed.

        Raises:
            InboxError: 403 when ``principal`` may not decide that request (checked before anything
                is sent), 400 for a malformed form, 409 when the request is no longer pending or
                the workflow refuses the decision (the message says why).
        """
        request_id = form.get("request_id", "")
        handle = self.client.get_workflow_handle(task_id)
        forbidden = InboxError(
            f"principal {principal!r} may not decide request {request_id!r} of {task_id!r}", 403
        )
        try:
            status = await self._status(handle)
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise forbidden from None
            raise InboxError(f"task {task_id} cannot be reached: {err.message}", 503) from None
        request = next((r for r in status.pending if r.request_id == request_id), None)
        if request is None:
            policy = await self.policy(handle)
            if policy is not None and may_view(policy, principal):
                raise InboxError(
                    f"request {request_id!r} of {task_id} is not pending (already decided?)", 409
                )
            raise forbidden
        if principal not in request.approvers:
            raise forbidden
        decision = self._decision(request, principal, form)
        policy = await self.policy(handle)
        if policy is not None:
            decision = self._signed(task_id, decision, policy, request.run_chain)
        # Sent by the one client of the protocol: not acted on later when no worker answers in time
        # (the task refuses it past its expiry).
        wait = DECIDE_TIMEOUT.total_seconds()
        try:
            outcome = await self.tasks.send_decision(task_id, decision, wait_seconds=wait)
        except DecisionRefused as err:
            detail = f"the task refused the decision: {err.reason}"
            return DecisionOutcome(
                request_id=request_id, accepted=False, phase=status.phase.value, detail=detail
            )
        except WorkerUnreachable:
            raise InboxError(
                f"no worker answered for task {task_id} within {wait:g} s; the decision was not applied "
                "and will not be: decide again once a worker runs",
                504,
            ) from None
        except AgentWorkerError as err:
            raise InboxError(f"task {task_id} cannot be reached: {err}", 503) from None
        assert outcome is not None  # an update always answers
        return outcome

    @staticmethod
    def _decision(request: ApprovalRequest, principal: str, form: dict[str, str]) -> ApprovalDecision:
        kind = form.get("decision", "")
        reason = form.get("reason", "").strip() or None
        raw: dict[str, Any] = {
            "request_id": request.request_id,
            "version": form.get("version", ""),
            "decision": kind,
            "principal": principal,
        }
        if reason:
            raw["reason"] = reason
        if kind == DecisionKind.REJECT.value and not reason:
            raise InboxError("a rejection needs a reason: the agent sees it", 400)
        if kind == DecisionKind.RESPOND.value and not reason:
            raise InboxError("a respond needs a message: the agent reads it instead of the result", 400)
        if kind == DecisionKind.EDIT.value:
            raw["edited_args"] = edited_arguments(request.action.arguments, form.get("edited_args", ""))
        if form.get("remember"):
            raw["remember"] = remembered(form["remember"])
        elif kind == DecisionKind.APPROVE.value:
            from agent_worker.inbox.grants import remember_from_form

            remember = remember_from_form(form)
            if remember is not None:
                raw["remember"] = remember
        if kind == DecisionKind.ANSWER.value:
            raw["answer"] = submitted_answer(request, form)
        try:
            return parse_decision(raw)
        except InvalidPayload as err:
            raise InboxError(str(err), 400) from None

    def _signed(
        self, task_id: str, decision: ApprovalDecision, policy: PolicySpec, run_chain: str | None
    ) -> ApprovalDecision:
        """Sign when the policy requires it or registers the principal's key (over the request's run
        chain, so the signature holds for this run of the task id only)."""
        if not policy.require_signatures and decision.principal not in policy.signers:
            return decision
        from agent_worker.security.signing import load_private_key, sign

        try:
            key = load_private_key(decision.principal, self.keys_dir)
        except (OSError, ValueError) as err:
            if policy.require_signatures:
                raise InboxError(
                    f"this task requires signed decisions and the inbox has no usable key for "
                    f"{decision.principal!r} in {self.keys_dir}: {err}",
                    409,
                ) from None
            return decision
        return decision.model_copy(update={"signature": sign(key, task_id, decision, run_chain)})


def remembered(text: str) -> dict[str, Any]:
    """A form's ``remember`` (a JSON object: ``scope``, ``when``, ``until``; the decision's model
    checks each).

    Raises:
        InboxError: (400) not a JSON object.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InboxError(f"remember is not valid JSON ({err.msg})", 400) from None
    if not isinstance(value, dict):
        raise InboxError("remember must be a JSON object", 400)
    return value


def submitted_answer(request: ApprovalRequest, form: dict[str, str]) -> Any:
    """The answer a form carries: ``answer_json`` (the API's, any JSON value), or ``answer`` as
    typed (a form question's parsed as JSON). Whether it fits the question, the task decides.

    Raises:
        InboxError: (400) no answer, or one that is not JSON where JSON is needed.
    """
    from agent_worker.schemas.questions import AnswerType, Question

    text, is_json = form.get("answer_json"), True
    if text is None:
        question = request.action.operation
        text = form.get("answer", "")
        is_json = isinstance(question, Question) and question.answer_type is AnswerType.FORM
    if not is_json:
        if not text.strip():
            raise InboxError("an answer is required", 400)
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InboxError(
            f"the answer is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})", 400
        ) from None


def edited_arguments(proposed: dict[str, Any], text: str) -> dict[str, Any]:
    """The arguments an edit changes: the submitted JSON object compared with the proposed arguments.

    Raises:
        InboxError: (400) not a JSON object, an argument removed or added, or nothing changed.
    """
    try:
        submitted = json.loads(text)
    except json.JSONDecodeError as err:
        raise InboxError(
            f"edited arguments are not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})", 400
        ) from None
    if not isinstance(submitted, dict):
        raise InboxError("edited arguments must be a JSON object", 400)
    removed = sorted(set(proposed) - set(submitted))
    added = sorted(set(submitted) - set(proposed))
    if removed or added:
        parts = [
            f"removed {', '.join(removed)}" if removed else "",
            f"added {', '.join(added)}" if added else "",
        ]
        raise InboxError(
            f"an edit can change arguments, not add or remove them ({'; '.join(p for p in parts if p)})", 400
        )
    changed = {k: v for k, v in submitted.items() if proposed[k] != v}
    if not changed:
        raise InboxError("the edit changes no argument; approve instead", 400)
    return changed
