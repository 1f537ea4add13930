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
    APPROVAL_COUNTED = "approval.counted"  # one vote of a quorum that does not settle it yet
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
    GRANT_CREATED = "grant.created"  # an approve-and-remember stored as a grant
    GRANT_USED = "grant.used"  # a remembered grant approved an action in place of a request
    GRANT_VOIDED = "grant.voided"  # a grant's tool schema, policy or agent version changed
    GRANT_REFUSED = "grant.refused"  # a grant the turn found did not hold up in the task's own checks
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
    FORK_STARTED = "fork.started"  # a fork took its parent's state at a step (``workflows.fork``)
    FORK_COMMAND_REPLAYED = "fork.command_replayed"  # a parent's command run again in the fork's sandbox
    WRITE_REUSED = "write.reused"  # a fork's write answered from its parent's receipt, nothing written
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


def event_id_for(task_id: str, run_chain: str | None, seq: int) -> str:
    """An event's stable id: ``<task id>/<run chain>/<seq>`` (``<task id>/<seq>`` before run chains)."""
    return f"{task_id}/{run_chain}/{seq}" if run_chain else f"{task_id}/{seq}"


class PackedEvent(BaseModel):
    """An event in a packed delivery (``PublishEventsInput.packed``): only what it does not share with
    the delivery's other events."""

    seq: int = Field(ge=1)
    type: EventType
    at: datetime
    phase: str
    data: dict[str, Any] = Field(default_factory=dict)


class PublishEventsInput(BaseModel):
    """Input of ``events.publish``: a task's events, in order, whole (``events``) or packed."""

    task_id: str
    events: list[Event] = Field(default_factory=list)
    run_chain: str | None = Field(default=None, description="The run chain of every packed event.")
    packed: list[PackedEvent] = Field(
        default_factory=list,
        description="Events without what every event of the delivery shares (schema, task id, run "
        "chain, and the event id made of them), each about 190 bytes of history; the activity puts "
        "it back (``unpacked``). Sent since patch ``packed-events``, after ``events``.",
    )
    basis: int | None = Field(
        default=None,
        description="Since patch ``local-delivery``: the workflow task that made the delivery, as "
        "``run index << 32 | history length`` (``delivery_basis``). A sink replaces the events it "
        "holds from the delivery's first ``seq`` on when they came with a lower basis (a workflow task "
        "that never committed) and drops the delivery when it holds one with a higher basis (it is "
        "that lost attempt). None: the events are committed, and the sink keeps the copy it has.",
    )

    def unpacked(self) -> list[Event]:
        """Every event of the delivery, whole, in order."""
        chain = self.run_chain
        return [
            *self.events,
            *(
                Event(event_id=event_id_for(self.task_id, chain, p.seq), task_id=self.task_id,
                      run_chain=chain, seq=p.seq, type=p.type, at=p.at, phase=p.phase, data=p.data)
                for p in self.packed
            ),
        ]  # fmt: skip

    @classmethod
    def pack(cls, task_id: str, events: list[Event]) -> PublishEventsInput:
        """``events`` packed, but for any whose envelope is not the delivery's (sent whole, first)."""
        chain = events[0].run_chain if events else None
        whole, packed = [], []
        for e in events:
            if (
                e.run_chain == chain
                and e.task_id == task_id
                and e.event_id == event_id_for(task_id, chain, e.seq)
            ):
                packed.append(PackedEvent(seq=e.seq, type=e.type, at=e.at, phase=e.phase, data=e.data))
            else:
                whole.append(e)
        if whole and packed and whole[-1].seq > packed[0].seq:  # in order only as all whole
            return cls(task_id=task_id, events=events)
        return cls(task_id=task_id, events=whole, run_chain=chain, packed=packed)


def delivery_basis(run_index: int, history_length: int) -> int:
    """The ``PublishEventsInput.basis`` of a delivery made by run ``run_index`` of a run chain in the
    workflow task that sees ``history_length`` events: later workflow tasks, and the retry of one that
    failed (its history has grown), have a higher one."""
    return run_index << 32 | history_length


class PublishEventsResult(BaseModel):
    """Output of ``events.publish``."""

    delivered: int
    new: int = Field(description="How many the sink did not hold yet.")
    replaced: int = Field(
        default=0, description="How many it held from a workflow task that never committed, replaced."
    )
