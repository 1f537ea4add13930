"""Tasks on a Temporal Schedule: ``AgentWorkerClient.schedules`` (and ``agent-worker schedule``).

A schedule (``schemas.schedules.TaskSchedule``) is a Temporal Schedule whose action starts the
``AgentTask`` workflow with the very input ``AgentWorkerClient.start`` sends
(``agent_worker.client.workflow_input``, handed in by ``AgentWorkerClient.schedules``), on the
client's task queue, with the same workflow task timeout. Each run is therefore a normal task
(budgets, policy, approvals, evidence), under the id ``<tenant>/<name>-<scheduled time>``.

Only schedules whose action starts ``AgentTask`` are this client's: ``list`` leaves the others out
(the sandbox reaper's, the fleet doctor's), and every other call refuses them as not found. Like the
task client, this module loads no worker code and builds the payload models on first use.

Errors (rooted at ``AgentWorkerError``): ``ScheduleNotFound``, ``ScheduleExists``; a spec or
cadence the server refuses (a cron expression it cannot read, an unknown time zone) is an
``AgentWorkerError`` with the server's words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleListActionStartWorkflow,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode

from agent_worker.errors import AgentWorkerError
from agent_worker.schemas import visibility

if TYPE_CHECKING:
    from agent_worker.schemas.schedules import ScheduledRun, ScheduleView, TaskSchedule

__all__ = ["CRON_MEMO", "ScheduleExists", "ScheduleNotFound", "TaskSchedules"]

CRON_MEMO = "agent_worker.cron"
"""The schedule memo holding the cron expression as given: Temporal keeps it only as calendar specs."""


class ScheduleNotFound(AgentWorkerError):
    """Raised when no task schedule has the id (none at all, or one that starts something else)."""


class ScheduleExists(AgentWorkerError):
    """Raised by ``create`` when a schedule with the id exists already (nothing is changed)."""


class TaskSchedules:
    """Create, read, pause, unpause, trigger and delete task schedules (get one from
    ``AgentWorkerClient.schedules``).

    Args:
        temporal: the connected Temporal client (the workers' data converter).
        task_queue: the queue each run's task starts on.
        workflow_input: builds the workflow input from a TaskSpec, as ``start`` does.
        task_timeout: the workflow task timeout each run starts with, as ``start``'s.
    """

    def __init__(
        self,
        temporal: Client,
        task_queue: str,
        workflow_input: Callable[[Any], dict[str, Any]],
        task_timeout: timedelta,
    ) -> None:
        self.temporal = temporal
        self.task_queue = task_queue
        self._workflow_input = workflow_input
        self._task_timeout = task_timeout

    async def create(self, schedule: TaskSchedule | dict[str, Any]) -> str:
        """Create the schedule (paused if it says so); its id, ``<tenant>/<name>``.

        Raises:
            pydantic.ValidationError: ``schedule`` is not a valid TaskSchedule (naming the field).
            ScheduleExists: one with that id exists (delete it first to change it).
            AgentWorkerError: the server refused the cadence (its words).
        """
        from agent_worker.schemas.schedules import TaskSchedule

        schedule = TaskSchedule.model_validate(schedule)
        schedule_id = schedule.schedule_id
        action = ScheduleActionStartWorkflow(
            visibility.WORKFLOW_TYPE,
            self._workflow_input(schedule.spec),
            id=schedule_id,
            task_queue=self.task_queue,
            task_timeout=self._task_timeout,
        )
        spec = ScheduleSpec(
            intervals=[ScheduleIntervalSpec(every=schedule.every)] if schedule.every else [],
            cron_expressions=[schedule.cron] if schedule.cron else [],
            time_zone_name=schedule.timezone,
        )
        policy = SchedulePolicy(
            overlap=ScheduleOverlapPolicy[schedule.overlap.name],
            catchup_window=schedule.catchup_window,
            pause_on_failure=schedule.pause_on_failure,
        )
        state = ScheduleState(paused=schedule.paused, note=schedule.note)
        try:
            await self.temporal.create_schedule(
                schedule_id,
                Schedule(action=action, spec=spec, policy=policy, state=state),
                memo={CRON_MEMO: schedule.cron} if schedule.cron else None,
            )
        except ScheduleAlreadyRunningError:
            raise ScheduleExists(f"schedule {schedule_id} exists already; delete it to change it") from None
        except RPCError as err:
            raise AgentWorkerError(f"cannot create schedule {schedule_id}: {err.message}") from None
        return schedule_id

    async def list(self, tenant: str | None = None) -> list[ScheduleView]:
        """Every task schedule (of ``tenant`` when given), by id, as ``describe`` reads it without
        its runs' outcomes. The list comes from visibility: a schedule just created may show a
        moment later."""
        ids = sorted(
            [
                entry.id
                async for entry in await self.temporal.list_schedules()
                if entry.schedule is not None
                and isinstance(entry.schedule.action, ScheduleListActionStartWorkflow)
                and entry.schedule.action.workflow == visibility.WORKFLOW_TYPE
                and (tenant is None or entry.id.startswith(f"{tenant}/"))
            ]
        )
        views = await asyncio.gather(*(self.describe(i, outcomes=False) for i in ids), return_exceptions=True)
        for view in views:
            if isinstance(view, BaseException) and not isinstance(view, ScheduleNotFound):
                raise view  # one deleted since it was listed is left out; anything else is not
        return [v for v in views if not isinstance(v, BaseException)]

    async def describe(self, schedule_id: str, *, outcomes: bool = True) -> ScheduleView:
        """The schedule: its task, cadence, policy, state, counts, running and recent runs (with each
        run's outcome unless ``outcomes`` is False) and next times. Under ``allow_all`` Temporal does
        not track which runs still run: only ``outcomes`` then finds them (among the recent ones).

        Raises:
            ScheduleNotFound: no task schedule has that id.
        """
        from agent_worker.schemas.schedules import OverlapPolicy, ScheduledRun, ScheduleView

        description = await self._describe(schedule_id)
        schedule, info = description.schedule, description.info
        action = schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        [raw] = await self.temporal.data_converter.decode(list(action.args)) or [{}]
        spec = raw.get("spec", raw) if isinstance(raw, dict) else {}
        recent = [
            ScheduledRun(task_id=r.action.workflow_id, scheduled_at=r.scheduled_at, started_at=r.started_at)
            for r in info.recent_actions
            if isinstance(r.action, ScheduleActionExecutionStartWorkflow)
        ]
        if outcomes:
            await asyncio.gather(*(self._outcome(run) for run in recent))
        # Temporal tracks the running runs only where the overlap policy needs them (not allow_all);
        # a recent run's own status says it runs either way.
        running = [r.workflow_id for r in info.running_actions]
        running += [r.task_id for r in recent if r.status == "running" and r.task_id not in running]
        return ScheduleView(
            schedule_id=description.id,
            tenant=spec.get("tenant", "default"),
            agent=spec.get("agent"),
            task_queue=action.task_queue,
            every=[interval.every for interval in schedule.spec.intervals],
            cron=await description.memo_value(CRON_MEMO, default=None),
            timezone=schedule.spec.time_zone_name,
            overlap=OverlapPolicy[schedule.policy.overlap.name],
            catchup_window=schedule.policy.catchup_window,
            pause_on_failure=schedule.policy.pause_on_failure,
            paused=schedule.state.paused,
            note=schedule.state.note or None,
            runs=info.num_actions,
            skipped_overlap=info.num_actions_skipped_overlap,
            missed_catchup=info.num_actions_missed_catchup_window,
            running=running,
            recent=recent,
            next_runs=list(info.next_action_times),
        )

    async def pause(self, schedule_id: str, note: str | None = None) -> None:
        """Pause it: no run starts until ``unpause`` (runs already started go on)."""
        handle = await self._handle(schedule_id)
        await handle.pause(note=note or "paused by agent-worker")

    async def unpause(self, schedule_id: str, note: str | None = None) -> None:
        """Unpause it: runs start again at their next times (missed ones within the catch-up window)."""
        handle = await self._handle(schedule_id)
        await handle.unpause(note=note or "unpaused by agent-worker")

    async def trigger(self, schedule_id: str) -> None:
        """Start a run now (the overlap policy applies), whether or not it is paused."""
        handle = await self._handle(schedule_id)
        await handle.trigger()

    async def delete(self, schedule_id: str) -> None:
        """Delete it: no run starts any more; runs already started go on to their end."""
        handle = await self._handle(schedule_id)
        await handle.delete()

    # ---- helpers -------------------------------------------------------------------------------

    async def _handle(self, schedule_id: str) -> ScheduleHandle:
        await self._describe(schedule_id)  # a task schedule, or ScheduleNotFound
        return self.temporal.get_schedule_handle(schedule_id)

    async def _describe(self, schedule_id: str) -> ScheduleDescription:
        try:
            description = await self.temporal.get_schedule_handle(schedule_id).describe()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise ScheduleNotFound(f"no schedule {schedule_id!r}") from None
            raise AgentWorkerError(f"cannot read schedule {schedule_id}: {err.message}") from None
        action = description.schedule.action
        if not (
            isinstance(action, ScheduleActionStartWorkflow) and action.workflow == visibility.WORKFLOW_TYPE
        ):
            raise ScheduleNotFound(f"schedule {schedule_id!r} starts no agent task")
        return description

    async def _outcome(self, run: ScheduledRun) -> None:
        """Fill in the run's workflow status and task phase (left None when it is gone)."""
        try:
            description = await self.temporal.get_workflow_handle(run.task_id).describe()
        except RPCError:
            return
        run.status = description.status.name.lower() if description.status else None
        run.phase = description.typed_search_attributes.get(visibility.PHASE)
