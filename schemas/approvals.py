"""Approval requests a task publishes and the decisions humans send back.

Decisions arrive as the signal ``submit_decision`` or the update ``decide``, as plain JSON from any
Temporal client. A decision binds to the exact ``version`` of the action it approves.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from agent_worker.schemas.actions import ProposedAction
from agent_worker.schemas.digests import DIGEST_PATTERN
from agent_worker.schemas.grants import Remember
from agent_worker.schemas.questions import MAX_ANSWER_BYTES
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

# Bounds on what a client may send in a decision: a decision is kept in the task's state and copied
# into events and evidence, so an unbounded field would grow every payload after it.
MAX_REQUEST_ID_CHARS = 128
MAX_PRINCIPAL_CHARS = 256
MAX_REASON_CHARS = 4_000
MAX_SIGNATURE_CHARS = 512
MAX_EDITED_ARGS_BYTES = 65_536
# A quorum's size: more distinct approvers than this on one action is a committee, not a rule.
MAX_QUORUM = 20


class DecisionKind(StrEnum):
    """What a principal decided about an approval request."""

    APPROVE = "approve"
    EDIT = "edit"  # approve with changed arguments
    REJECT = "reject"
    RESPOND = "respond"  # do not run the action; the model reads ``reason`` as its result
    ANSWER = "answer"  # answer a question (``ask_human``) with ``answer``


class ApprovalSla(BaseModel):
    """When a request's approvers are reminded, when it is escalated to a next group, how long it
    may wait, and what happens when nobody decides in time (a policy rule's ``sla``). Reminders and
    escalations run on the task's durable timers and are notified through the worker's notifiers
    (``notify_webhook_url``, ``notify_smtp_url``), once each."""

    model_config = ConfigDict(extra="forbid")

    remind_after_seconds: float | None = Field(
        default=None, gt=0, description="Remind the approvers this long after the request (once)."
    )
    escalate_after_seconds: float | None = Field(
        default=None,
        gt=0,
        description="This long after the request, add escalate_to to who may decide, and notify them.",
    )
    escalate_to: list[str] = Field(default_factory=list, description="The next approver group.")
    expire_after_seconds: float | None = Field(
        default=None,
        gt=0,
        le=10 * 365 * 24 * 3600,
        description="The request's deadline (default: the task's budgets.approval_timeout_seconds).",
    )
    on_expiry: Literal["hand_off", "continue"] = Field(
        default="hand_off",
        description="Nobody decided by the deadline: hand the task off, or continue without the action "
        "(the model is told it expired, unanswered). Either way it is never reported as rejected.",
    )

    @model_validator(mode="after")
    def _escalation_has_a_group(self) -> ApprovalSla:
        if self.escalate_after_seconds is not None and not self.escalate_to:
            raise ValueError("escalate_after_seconds needs escalate_to (who to escalate to)")
        if self.escalate_to and self.escalate_after_seconds is None:
            raise ValueError("escalate_to needs escalate_after_seconds (when to escalate)")
        return self


class Quorum(BaseModel):
    """A rule's quorum: ``required`` distinct approvers among its approvers must approve, none of them
    the task's starter (``TaskSpec.started_by``); each approver counts once (``workflows.quorum``)."""

    model_config = ConfigDict(extra="forbid")

    required: int = Field(
        ge=1, le=MAX_QUORUM, description="How many distinct approvers must approve (M of the rule's N)."
    )
    veto: bool = Field(
        default=True,
        description="One rejection rejects the action; false: a rejection counts against it, and the "
        "action is rejected once the approvers left could no longer make up the quorum.",
    )


class Vote(BaseModel):
    """One approver's accepted decision on a quorum request: checked like any decision (version,
    approver, signature), counted once."""

    principal: str
    decision: DecisionKind
    version: str
    via: str = "signal"
    decided_at: datetime
    reason: str | None = None


class ApprovalRequest(BaseModel):
    """One action waiting for a human: who may decide, until when, and on which version."""

    request_id: str
    action: ProposedAction
    version: str = Field(pattern=DIGEST_PATTERN)
    approvers: list[str]
    reason: str = ""
    requested_at: datetime
    deadline: datetime
    decided: bool = False
    run_chain: str | None = Field(
        default=None,
        description="The task's run chain, which a signed decision must cover "
        "(`security.signing.signed_message`); None for tasks that started before it existed.",
    )
    sla: ApprovalSla | None = Field(default=None, description="Its rule's reminders, escalation, expiry.")
    reminded: bool = Field(default=False, description="The reminder went out.")
    escalated: bool = Field(default=False, description="Escalated: escalate_to may decide too.")
    quorum: Quorum | None = Field(default=None, description="Its rule's quorum, when it has one.")
    votes: list[Vote] = Field(default_factory=list, description="A quorum's decisions so far.")
    progress: str = Field(
        default="", description="A quorum's progress for people, e.g. '1 of 2 approvals: alice'."
    )


class ApprovalDecision(BaseModel):
    """A principal's decision on one request, as sent by any Temporal client."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=MAX_REQUEST_ID_CHARS)
    version: str = Field(pattern=DIGEST_PATTERN)
    decision: DecisionKind
    principal: str = Field(min_length=1, max_length=MAX_PRINCIPAL_CHARS)
    edited_args: dict[str, Any] | None = Field(
        default=None, description=f"At most {MAX_EDITED_ARGS_BYTES:,} bytes as JSON."
    )
    reason: str | None = Field(
        default=None,
        max_length=MAX_REASON_CHARS,
        description="Why; for a rejection or a respond, the message the model will see.",
    )
    answer: Any = Field(
        default=None,
        description="For 'answer': the answer to a question, a JSON value that must fit its type "
        f"(text, one of the options, or the form's JSON Schema); at most {MAX_ANSWER_BYTES:,} bytes.",
    )
    signature: str | None = Field(default=None, max_length=MAX_SIGNATURE_CHARS)
    expires_at: AwareDatetime | None = Field(
        default=None,
        description="When set, the task refuses the decision once its clock is past this time: a "
        "client that stopped waiting for an answer (no worker reached it) is not acted on later.",
    )
    remember: Remember | None = Field(
        default=None,
        description="Approve and remember: later matching actions are approved by the grant this "
        "stores, without asking (an `approve` only, under a policy with `grants`; docs/approvals.md).",
    )

    @model_validator(mode="after")
    def _edited_args_only_with_edit(self) -> ApprovalDecision:
        if self.decision is DecisionKind.EDIT and self.edited_args is None:
            raise ValueError("edited_args is required when decision is 'edit'")
        if self.decision is not DecisionKind.EDIT and self.edited_args is not None:
            raise ValueError("edited_args is only allowed when decision is 'edit'")
        if self.remember is not None and self.decision is not DecisionKind.APPROVE:
            raise ValueError("remember goes with an 'approve' only")
        if (self.decision is DecisionKind.ANSWER) != (self.answer is not None):
            raise ValueError("answer is required with decision 'answer', and only allowed with it")
        if self.decision is DecisionKind.RESPOND and not (self.reason or "").strip():
            raise ValueError(
                "reason is required when decision is 'respond': it is the message the model reads"
            )
        if self.answer is not None:
            size = len(json.dumps(self.answer, separators=(",", ":"), default=str))
            if size > MAX_ANSWER_BYTES:
                raise ValueError(
                    f"answer is {size:,} bytes as JSON, more than the {MAX_ANSWER_BYTES:,} allowed"
                )
        if self.edited_args is not None:
            size = len(json.dumps(self.edited_args, separators=(",", ":"), default=str))
            if size > MAX_EDITED_ARGS_BYTES:
                raise ValueError(
                    f"edited_args is {size:,} bytes as JSON, more than the {MAX_EDITED_ARGS_BYTES:,} allowed"
                )
        return self


class DecisionRecord(BaseModel):
    """An accepted decision, kept as evidence."""

    request_id: str
    tool: str
    decision: DecisionKind
    principal: str
    version: str
    edited_version: str | None = None
    edited_args: dict[str, Any] | None = None
    reason: str | None = None
    answer: Any = Field(default=None, description="For 'answer': the answer the model was given.")
    via: str = "signal"
    decided_at: datetime
    revoked_at: datetime | None = Field(
        default=None, description="Set when the principal lost the permission before the action ran."
    )
    revoked_reason: str | None = None
    refused_reason: str | None = Field(
        default=None,
        description="Set when the decision could not take effect (an edit the tool refused); the "
        "action was put up for a decision again.",
    )
    agent: str = Field(
        default="",
        description="The SDK agent that proposed the action (its request's `action.agent`).",
    )
    grant_id: str | None = Field(
        default=None,
        description="The remembered grant that approved the action in place of a person (via 'grant').",
    )
    remember: Remember | None = Field(default=None, description="What the approver asked to remember.")
    remembered_as: str | None = Field(
        default=None, description="The grant this decision's remember was stored as (once stored)."
    )
    signature: str | None = Field(
        default=None, description="With a remember: the decision's signature, which its grant keeps."
    )
    votes: list[Vote] = Field(
        default_factory=list,
        description="For a quorum: every decision counted, in order; `principal` is the one that "
        "settled it (the last approval, or the rejection).",
    )


class IgnoredDecision(BaseModel):
    """A decision that changed nothing, with the reason it was ignored."""

    request_id: str | None = None
    principal: str | None = None
    version: str | None = None
    decision: str | None = None
    reason: str
    via: str = "signal"
    received_at: datetime


class DecisionOutcome(BaseModel):
    """The update ``decide``'s answer."""

    request_id: str
    accepted: bool
    phase: str
    detail: str = ""
