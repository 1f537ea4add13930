"""The doctor's check of scheduled tasks (``agent-worker doctor``, the ``FleetDoctor`` workflow):
``schedule-runs``, a task schedule whose latest ``schedule_failures`` finished runs all failed.

A task schedule is a Temporal Schedule whose action starts ``AgentTask`` (``agent-worker schedule``).
Its recent actions (Temporal keeps the last ten) name its runs; each finished one is read from
visibility (``describe``). A run counts as failed when its workflow failed or timed out, or when the
task ended ``handed_off`` (it stopped for a human). Runs still going are passed over; a run cancelled
or terminated (by a person, or by the ``cancel_other`` / ``terminate_other`` overlap policies) ends
the streak, as a success does. The finding names the schedule, the streak, and the newest failure's
words, so the one reading it knows what to fix before the next run fails the same way.
"""

from __future__ import annotations

import asyncio

from agent_worker.schemas.health import DoctorInput, Finding
from agent_worker.schemas.tasks import TaskPhase
from agent_worker.schemas.visibility import PHASE, WORKFLOW_TYPE
from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleListActionStartWorkflow,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.service import RPCError

__all__ = ["check_schedules"]

_FAILED = {WorkflowExecutionStatus.FAILED: "failed", WorkflowExecutionStatus.TIMED_OUT: "timed out"}


async def check_schedules(client: Client, input: DoctorInput) -> tuple[int, list[Finding]]:
    """The task schedules checked (those starting tasks on ``input.task_queue`` when it is given)
    and the ones whose runs keep failing."""
    ids = [
        entry.id
        async for entry in await client.list_schedules()
        if entry.schedule is not None
        and isinstance(entry.schedule.action, ScheduleListActionStartWorkflow)
        and entry.schedule.action.workflow == WORKFLOW_TYPE
    ]
    checked = await asyncio.gather(*(_check(client, i, input) for i in ids[: input.limit]))
    return sum(c is not False for c in checked), [f for f in checked if isinstance(f, Finding)]


async def _check(client: Client, schedule_id: str, input: DoctorInput) -> Finding | bool | None:
    """A finding, None when healthy, False when not checked (gone, or on another task queue)."""
    try:
        description = await client.get_schedule_handle(schedule_id).describe()
    except RPCError:
        return False  # deleted since it was listed
    action = description.schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow) or (
        input.task_queue is not None and action.task_queue != input.task_queue
    ):
        return False
    streak = input.thresholds.schedule_failures
    failed: list[tuple[str, str]] = []  # (task id, how), newest first
    for result in reversed(description.info.recent_actions):
        if not isinstance(result.action, ScheduleActionExecutionStartWorkflow):
            continue
        task_id = result.action.workflow_id
        try:
            run = await client.get_workflow_handle(task_id).describe()
        except RPCError:
            continue  # past retention: nothing to say about it
        if run.status is WorkflowExecutionStatus.RUNNING:
            continue
        how = _failure(run)
        if how is None:
            return None  # a finished run that did not fail ends the streak
        failed.append((task_id, how))
        if len(failed) == streak:
            break
    if len(failed) < streak:
        return None
    newest, how = failed[0]
    words = await _words(client, newest)
    return Finding(
        task_id=newest,
        schedule_id=schedule_id,
        check="schedule-runs",
        detail=f"its last {streak} finished runs failed (newest {newest}, {how}{words})",
        advice=f"read the newest run (`agent-worker status {newest}`) and fix its spec or what it "
        f"depends on; meanwhile `agent-worker schedule pause {schedule_id}` stops new runs",
    )


def _failure(run: WorkflowExecutionDescription) -> str | None:
    """How a finished run failed, or None when it did not."""
    if run.status in _FAILED:
        return _FAILED[run.status]
    if run.typed_search_attributes.get(PHASE) == TaskPhase.HANDED_OFF.value:
        return "handed off"
    return None


async def _words(client: Client, task_id: str) -> str:
    """``: <the failure's message>`` of a failed run, or nothing."""
    try:
        await client.get_workflow_handle(task_id).result(follow_runs=False)
    except WorkflowFailureError as err:
        cause = err.cause
        return f": {getattr(cause, 'message', None) or cause}"
    except Exception:
        return ""
    return ""
