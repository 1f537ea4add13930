"""Fleet health: find the running tasks that are stuck, and say why and what to do. One function,
``diagnose``, behind both ``agent-worker doctor`` (a person, cron, CI) and the ``doctor.check``
activity of the scheduled ``FleetDoctor`` workflow.

Each running task (``WorkflowType = 'AgentTask'``, narrowed by task queue or a query) is checked from
what Temporal already knows about it (``describe``: its pending workflow task and activities, its
history's length and size) and from its ``status`` query (its pending approvals):

- ``workflow-task``: its workflow task failed ``workflow_task_attempts`` times or more in a row (a
  bug or a non-determinism: the task makes no progress until a worker can run it);
- ``activity-retries``: an activity is on attempt ``activity_attempts`` or later (its last failure
  is named);
- ``heartbeat``: a started activity has not heartbeated for ``heartbeat_stall_seconds`` (its worker
  may be gone or hung);
- ``approval-sla``: a request has waited longer than ``approval_sla_seconds``, or is past its
  deadline;
- ``history``: its history passes ``history_fraction`` of Temporal's limits (51,200 events, 50 MB),
  after which the server terminates it;
- ``unreachable``: no worker answered its ``status`` query.

And each task schedule (``agent-worker schedule``) of that task queue, by
``activities.schedule_health``:

- ``schedule-runs``: its last ``schedule_failures`` finished runs failed, timed out or were handed
  off (the finding names the schedule, and its newest failed run as the task).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import structlog
from agent_worker.activities.errors import activity_boundary
from agent_worker.activities.schedule_health import check_schedules
from agent_worker.schemas.health import DoctorInput, DoctorReport, Finding, Thresholds
from agent_worker.schemas.tasks import TaskStatus
from agent_worker.schemas.visibility import STATUS_QUERY, TASKS_QUERY, queryable
from agent_worker.telemetry import metrics
from temporalio import activity
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

__all__ = ["HISTORY_BYTES_LIMIT", "HISTORY_EVENT_LIMIT", "HealthActivities", "diagnose"]

log = structlog.get_logger(__name__)

# Temporal's default limits on one run's history (the server terminates a run past them).
HISTORY_EVENT_LIMIT = 51_200
HISTORY_BYTES_LIMIT = 50 * 1024 * 1024
# How long one task's ``status`` query may take before the task counts as unreachable.
STATUS_WAIT_SECONDS = 5.0


async def diagnose(client: Client, input: DoctorInput) -> DoctorReport:
    """Check the running tasks ``input`` names, and the task schedules; the findings, by task.

    Raises:
        ValueError: ``input.task_queue`` cannot be put in a visibility query.
    """
    text = f"{TASKS_QUERY} AND ExecutionStatus = 'Running'"
    if input.task_queue is not None:
        if not queryable(input.task_queue):
            raise ValueError(f"task queue {input.task_queue!r} is not a valid task queue name")
        text += f" AND TaskQueue = '{input.task_queue}'"
    if input.query:
        text += f" AND ({input.query})"
    ids = [e.id async for e in client.list_workflows(text, limit=input.limit)]
    found = await asyncio.gather(*(_check(client, task_id, input.thresholds) for task_id in ids))
    schedules, failing = await check_schedules(client, input)
    return DoctorReport(
        checked=len(ids),
        findings=[f for task in found for f in task] + failing,
        at=datetime.now(UTC),
        schedules_checked=schedules,
    )


async def _check(client: Client, task_id: str, thresholds: Thresholds) -> list[Finding]:
    now = datetime.now(UTC)
    handle = client.get_workflow_handle(task_id)
    description = (await handle.describe()).raw_description
    findings = []
    pending_task = description.pending_workflow_task
    if (
        description.HasField("pending_workflow_task")
        and pending_task.attempt >= thresholds.workflow_task_attempts
    ):
        findings.append(
            Finding(
                task_id=task_id,
                check="workflow-task",
                detail=f"its workflow task failed {pending_task.attempt - 1} times in a row",
                advice="read the worker log for the failure (a bug or a non-determinism); fix and "
                "redeploy, or reset the task (`temporal workflow reset`)",
            )
        )
    for pending in description.pending_activities:
        name = pending.activity_type.name
        if pending.attempt >= thresholds.activity_attempts:
            last = pending.last_failure.message if pending.HasField("last_failure") else "unknown"
            findings.append(
                Finding(
                    task_id=task_id,
                    check="activity-retries",
                    detail=f"{name} is on attempt {pending.attempt}: {last}",
                    advice="fix what it depends on (the failure says what); it retries on its own "
                    "until its attempts run out, then the task hands off",
                )
            )
        signs = [
            getattr(pending, field).ToDatetime(UTC)
            for field in ("last_started_time", "last_heartbeat_time")
            if pending.HasField(field)
        ]
        last_sign = max(signs, default=None)
        if pending.state == 2 and last_sign is not None:  # PENDING_ACTIVITY_STATE_STARTED
            quiet = (now - last_sign).total_seconds()
            if quiet >= thresholds.heartbeat_stall_seconds:
                findings.append(
                    Finding(
                        task_id=task_id,
                        check="heartbeat",
                        detail=f"{name} (attempt {pending.attempt}) has not heartbeated for {quiet:.0f} s",
                        advice="check its worker (alive? hung?); Temporal retries it elsewhere after "
                        "its heartbeat timeout",
                    )
                )
    info = description.workflow_execution_info
    events_at = thresholds.history_fraction * HISTORY_EVENT_LIMIT
    bytes_at = thresholds.history_fraction * HISTORY_BYTES_LIMIT
    if info.history_length >= events_at or info.history_size_bytes >= bytes_at:
        findings.append(
            Finding(
                task_id=task_id,
                check="history",
                detail=f"its history holds {info.history_length:,} events, {info.history_size_bytes:,} "
                f"bytes (limits {HISTORY_EVENT_LIMIT:,} events, {HISTORY_BYTES_LIMIT:,} bytes)",
                advice="it continues as new at its next step; a task stuck in one step this long "
                "needs a look at what floods it (signals, follow-ups)",
            )
        )
    try:
        status: TaskStatus = await asyncio.wait_for(
            handle.query(
                STATUS_QUERY, result_type=TaskStatus, rpc_timeout=timedelta(seconds=STATUS_WAIT_SECONDS)
            ),
            STATUS_WAIT_SECONDS,
        )
    except (TimeoutError, RPCError, WorkflowQueryFailedError) as err:
        reason = "timed out" if isinstance(err, TimeoutError) else str(err)
        findings.append(
            Finding(
                task_id=task_id,
                check="unreachable",
                detail=f"no worker answered its status query within {STATUS_WAIT_SECONDS:g} s ({reason})",
                advice="start a worker for its task queue, or check its workers",
            )
        )
        return findings
    for request in status.pending:
        waited = (now - request.requested_at).total_seconds()
        overdue = request.deadline <= now
        if overdue or waited >= thresholds.approval_sla_seconds:
            findings.append(
                Finding(
                    task_id=task_id,
                    check="approval-sla",
                    detail=f"request {request.request_id} ({request.action.tool}) has waited "
                    f"{waited:.0f} s for {', '.join(request.approvers)}"
                    + (" and is past its deadline" if overdue else ""),
                    advice="remind the approvers (`agent-worker inbox`), or decide it",
                )
            )
    return findings


class HealthActivities:
    """``doctor.check`` with the worker's Temporal client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name="doctor.check")
    @activity_boundary
    async def check(self, input: DoctorInput) -> DoctorReport:
        """One check of the fleet: each finding is logged (a warning) and counted in
        ``agent_worker_doctor_findings`` (by check), so an alert can fire on it."""
        report = await diagnose(self.client, input)
        for finding in report.findings:
            log.warning(
                "stuck task",
                task_id=finding.task_id,
                schedule_id=finding.schedule_id,
                check=finding.check,
                detail=finding.detail,
            )
            metrics.activity_counter("agent_worker_doctor_findings", 1, check=finding.check)
        log.info("fleet checked", checked=report.checked, findings=len(report.findings))
        return report
