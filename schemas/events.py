"""Structured task events, schema version 1.

Events are for machines (alerts, dashboards, audits). Each has a stable ``event_id``
(``<task id>/<run chain>/<seq>``; ``<task id>/<seq>`` for tasks started before run chains) so a
consumer that sees one twice can drop the copy; a reused task id is a new run chain whose ``seq``
starts again at 1. The workflow keeps a
bounded tail of them in its state for the ``status`` query.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

EVENT_SCHEMA = "agent-worker.event/v1"


class EventType(StrEnum):
    """Every kind of event a task emits."""

    TASK_STARTED = "task.started"
    TASK_REFUSED = "task.refused"
    PHASE_CHANGED = "phase.changed"
    TURN_STARTED = "turn.started"
    TURN_FINISHED = "turn.finished"
    ACTION_PROPOSED = "action.proposed"
    TOOL_CALLED = "tool.called"
    POLICY_DECIDED = "policy.decided"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_DECIDED = "approval.decided"
    APPROVAL_IGNORED = "approval.ignored"
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_REMINDED = "approval.reminded"
    APPROVAL_ESCALATED = "approval.escalated"
    SANDBOX_CREATED = "sandbox.created"
    SANDBOX_EXEC = "sandbox.exec"
    SANDBOX_DESTROYED = "sandbox.destroyed"
    SANDBOX_LOST = "sandbox.lost"
    SANDBOX_LEFT = "sandbox.left"  # not destroyed: its host did not answer; its reaper removes it
    AUTHZ_CHECKED = "authz.checked"
    AUTHZ_REVOKED = "authz.revoked"
    WRITE_ATTEMPTED = "write.attempted"
    WRITE_CONFIRMED = "write.confirmed"
    WRITE_UNKNOWN = "write.unknown"
    WRITE_RECONCILED = "write.reconciled"
    WRITE_CONFLICT = "write.conflict"
    WRITE_REJECTED = "write.rejected"
    TOOL_EFFECT = "tool.effect"
    DELEGATION_STARTED = "delegation.started"
    DELEGATION_FINISHED = "delegation.finished"
    BUDGET_EXHAUSTED = "budget.exhausted"
    BUDGET_SOFT_LIMIT = "budget.soft_limit"
    BUDGET_EXTENSION_REQUESTED = "budget.extension_requested"
    BUDGET_EXTENDED = "budget.extended"
    INPUT_ADDED = "input.added"
    INPUT_IGNORED = "input.ignored"
    THREAD_STARTED = "thread.started"
    THREAD_CONTINUED = "thread.continued"
    TURN_INTERRUPTED = "turn.interrupted"
    CONTINUED_AS_NEW = "task.continued_as_new"
    CONTEXT_COMPACTED = "context.compacted"
    EVIDENCE_ARCHIVED = "evidence.archived"
    DISPATCH_MOVED = "dispatch.moved"
    WORK_TAKEN_OVER = "work.taken_over"  # a turn or command resumed elsewhere after a worker loss
    TASK_FINISHED = "task.finished"


class Event(BaseModel):
    """One thing that happened to a task."""

    schema_: Literal["agent-worker.event/v1"] = Field(default=EVENT_SCHEMA, alias="schema")
    event_id: str
    task_id: str
    seq: int = Field(ge=1)
    type: EventType
    at: datetime
    phase: str
    data: dict[str, Any] = Field(default_factory=dict)
    run_chain: str | None = Field(
        default=None,
        description="The run chain (first run id) of the task's runs that emitted it: a reused task id "
        "starts a new chain, with its own sequence.",
    )

    model_config = {"populate_by_name": True, "serialize_by_alias": True}


class PublishEventsInput(BaseModel):
    """Input of ``events.publish``: a task's events, in order."""

    task_id: str
    events: list[Event]


class PublishEventsResult(BaseModel):
    """Output of ``events.publish``."""

    delivered: int
    new: int = Field(description="How many the sink did not hold yet.")
