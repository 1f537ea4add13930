"""What Temporal shows of a task, kept in step with its state: its phase (the time spent in the phase
it leaves added to its usage), its search attributes (``schemas.visibility``) and its current details
in the UI. Workflow code: deterministic, no I/O of its own.

On release line 0.3 a change between working phases (``running``, ``committing``, ``reconciling``)
is published once it settles: after ``SETTLE_SECONDS``, or with the next change that shows at once
(a wait for a person begins or ends, the task ends), whichever comes first. Each upsert is a
visibility write on the server, the costliest thing an approval asks of it, and most such phases
last milliseconds (bench/findings.md). The current details are set at once: they cost nothing.

On 0.4 a change to ``running`` shows at once too; only the phases around a write, a lookup or the
start (``committing``, ``reconciling``, ``initializing``) settle. On 0.3 the settle timer of a change to
``running`` was left running through the work that followed, often the task's last turn: when it fired
while the task's last workflow task was open (a local activity delivers the events there), the server
refused the completion (a new event arrived) and the worker replayed the whole run. In a burst of
approvals, four tasks in ten did (bench/findings.md). On 0.4 a timer runs only while a short phase
lasts (``SHORT_PHASE_SECONDS``), and a change to ``running`` cancels it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas import visibility
    from agent_worker.schemas.approvals import ApprovalRequest
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import TaskPhase, TaskSpec, TaskState
    from agent_worker.telemetry import metrics

from agent_worker.workflows.context import Emit

# How long a change that leaves nobody waiting may go unpublished (release 0.3): a phase that lasts
# longer is published by a timer; a shorter one is published with the change after it.
SETTLE_SECONDS = 2.0
# The same on 0.4, where only the short phases settle: one that lasts this long is stuck (a business
# system that does not answer, say). In a burst a write waits seconds for a worker; 2 s published it.
SHORT_PHASE_SECONDS = 10.0
# The settle timer's summary (the UI shows it beside the timer).
SETTLE_SUMMARY = "publish the phase"


class TaskVisibility:
    """Enters one task's phases and publishes them. ``pending`` gives the requests still waiting for a
    decision (the approval desk's, made after the context that carries ``set_phase``)."""

    def __init__(
        self,
        spec: TaskSpec | None,
        state: TaskState,
        *,
        emit: Emit,
        pending: Callable[[], list[ApprovalRequest]],
    ) -> None:
        self.spec = spec
        self.state = state
        self.emit = emit
        self.pending = pending
        # Decided in ``AgentTaskWorkflow.run``: the minimum of round trips (``MINIMUM_ROUND_TRIPS_PATCH``)
        # and whether the task is on a thread.
        self.lean = False
        self.threaded = False
        # What the search attributes were last set to (``publish``): only changes are upserted.
        self.published: dict[str, Any] = {}
        # Decided in ``AgentTaskWorkflow.run``: whether a phase is published once it settles (0.3), and
        # whether ``running`` is published at once all the same (0.4).
        self.settled = False
        self.running_at_once = False
        # The timer that publishes a change that has not settled yet.
        self.settling: asyncio.Task[None] | None = None

    def set_phase(self, phase: TaskPhase) -> None:
        if phase is self.state.phase:
            return
        previous = self.state.phase
        self.state.phase = phase
        self.account_time(previous)
        self.emit(EventType.PHASE_CHANGED, previous=previous.value, phase=phase.value)
        metrics.workflow_counter("agent_worker_phase_entered", phase=phase.value)
        self.publish()

    def account_time(self, ended: TaskPhase) -> None:
        """Add the time spent in the phase that just ``ended`` to the task's usage: waiting for a human,
        or working (a terminal phase adds nothing)."""
        now, since = workflow.now(), self.state.phase_since
        self.state.phase_since = now
        if since is None or ended.terminal:
            return
        spent = max((now - since).total_seconds(), 0.0)
        if ended is TaskPhase.AWAITING_APPROVAL:
            self.state.usage.waiting_seconds += spent
        else:
            self.state.usage.active_seconds += spent

    def publish(self) -> None:
        """Keep search attributes and the UI's current details in step with the state (on a settled
        run, a change between working phases once it settles, unless ``at_once``)."""
        pending = self.pending()
        self.show_details(pending)
        if self.settled and self.published and not self.at_once():
            if self.settling is None:
                self.settling = asyncio.create_task(self.settle())
            return
        if self.settling is not None and not self.state.phase.terminal:
            # Published now, with the change the timer waited for (a run that ends leaves it be).
            self.settling.cancel()
            self.settling = None
        self.upsert(pending)

    def at_once(self) -> bool:
        """Whether the state must be visible now: the task begins or ends a wait for a person (what
        the inbox and ``AWAITING_QUERY`` list it by: a decided task must leave the list even when no
        worker takes its next step for a while), has ended, or (on 0.4) goes back to ``running``."""
        waited = self.published.get(visibility.AWAITING_APPROVAL.name) is True
        phase = self.state.phase
        running = self.running_at_once and phase is TaskPhase.RUNNING
        return phase.terminal or phase is TaskPhase.AWAITING_APPROVAL or waited or running

    @property
    def settle_seconds(self) -> float:
        """How long a change may go unpublished: on 0.4 only a short phase settles, and longer."""
        return SHORT_PHASE_SECONDS if self.running_at_once else SETTLE_SECONDS

    async def settle(self) -> None:
        """Publish the state once it has had ``settle_seconds`` to settle."""
        try:
            await workflow.sleep(self.settle_seconds, summary=SETTLE_SUMMARY)
        except asyncio.CancelledError:
            return
        self.settling = None
        self.upsert()

    def upsert(self, pending: list[ApprovalRequest] | None = None) -> None:
        """Upsert the search attributes (on a lean run, only those that changed); ``pending``: the
        requests still waiting, when the caller has them."""
        spec = self.spec
        pending = self.pending() if pending is None else pending
        approvers = sorted({p for r in pending for p in r.approvers})
        values: list[tuple[Any, Any]] = [
            (visibility.PHASE, self.state.phase.value),
            (visibility.TENANT, spec.tenant if spec else ""),
            (visibility.AGENT, spec.agent if spec else ""),
            (visibility.AWAITING_APPROVAL, self.state.phase is TaskPhase.AWAITING_APPROVAL),
            (visibility.APPROVERS, approvers),
            *([(visibility.THREAD, spec.thread)] if self.threaded and spec else []),
        ]
        if self.lean:
            # Only what changed (each upsert is an event in the history; most set one attribute).
            values = [(key, value) for key, value in values if self.published.get(key.name, ()) != value]
            self.published.update((key.name, value) for key, value in values)
        if values:
            workflow.upsert_search_attributes([key.value_set(value) for key, value in values])

    def show_details(self, pending: list[ApprovalRequest]) -> None:
        """The UI's current details: what the task waits for (``pending``), or its phase."""
        if self.state.phase is TaskPhase.AWAITING_APPROVAL and pending:
            lines = [f"**Waiting for approval** of {len(pending)} action(s):"]
            lines += [
                f"- `{r.request_id}` {r.action.tool} by {' or '.join(r.approvers)}, version `{r.version}`, "
                f"until {r.deadline.isoformat()}"
                for r in pending
            ]
            self.details("\n".join(lines))
        else:
            self.details(
                f"Phase: {self.state.phase.value}" + (f" ({self.state.reason})" if self.state.reason else "")
            )

    def details(self, text: str) -> None:
        workflow.set_current_details(text)
