"""``agent-worker doctor``: find the tasks that are stuck, and say why and what to do.

Each running task (``WorkflowType = 'AgentTask'``, narrowed by ``--task-queue`` or ``--query``) is
checked from what Temporal already knows about it (``describe``: its pending workflow task and
activities, its history's length and size) and from its ``status`` query (its pending approvals):

- ``workflow-task``: its workflow task failed ``--workflow-task-attempts`` times or more in a row (a
  bug or a non-determinism: the task makes no progress until a worker can run it);
- ``activity-retries``: an activity is on attempt ``--activity-attempts`` or later (its last failure
  is named);
- ``heartbeat``: a started activity has not heartbeated for ``--heartbeat-stall`` seconds (its worker
  may be gone or hung);
- ``approval-sla``: a request has waited longer than ``--approval-sla`` seconds, or is past its
  deadline;
- ``history``: its history passes ``--history-fraction`` of Temporal's limits (51,200 events, 50 MB),
  after which the server terminates it;
- ``unreachable``: no worker answered its ``status`` query.

Exit status: 0 when every task is healthy, 1 when a finding is listed (for cron and CI), 2 when the
check itself could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from cli.context import CliContext
from cli.errors import CliError

__all__ = ["Finding", "Thresholds", "diagnose", "register"]

# Temporal's default limits on one run's history (the server terminates a run past them).
HISTORY_EVENT_LIMIT = 51_200
HISTORY_BYTES_LIMIT = 50 * 1024 * 1024


@dataclass(frozen=True)
class Thresholds:
    """When a task counts as stuck."""

    workflow_task_attempts: int = 3
    activity_attempts: int = 5
    heartbeat_stall_seconds: float = 120.0
    approval_sla_seconds: float = 24 * 3600.0
    history_fraction: float = 0.8


@dataclass(frozen=True)
class Finding:
    """One reason a task needs attention, and what to do about it."""

    task_id: str
    check: str
    detail: str
    advice: str

    def line(self) -> str:
        return f"{self.task_id}  {self.check}: {self.detail} -> {self.advice}"


def register(sub: Any) -> None:
    """Add ``doctor``."""
    doctor = sub.add_parser("doctor", help="find stuck tasks: failing workflow tasks, retries, SLAs, history")
    doctor.add_argument("--task-queue", help="only the tasks of this task queue")
    doctor.add_argument("--query", help="a visibility query narrowing the running tasks further")
    defaults = Thresholds()
    doctor.add_argument("--workflow-task-attempts", type=int, default=defaults.workflow_task_attempts)
    doctor.add_argument("--activity-attempts", type=int, default=defaults.activity_attempts)
    doctor.add_argument("--heartbeat-stall", type=float, default=defaults.heartbeat_stall_seconds)
    doctor.add_argument("--approval-sla", type=float, default=defaults.approval_sla_seconds, help="seconds")
    doctor.add_argument("--history-fraction", type=float, default=defaults.history_fraction)
    doctor.add_argument("--limit", type=int, default=1000, help="check at most this many tasks")
    doctor.add_argument("--json", action="store_true", help="one JSON finding per line")
    doctor.set_defaults(handler=cmd_doctor)


async def cmd_doctor(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    thresholds = Thresholds(
        workflow_task_attempts=args.workflow_task_attempts,
        activity_attempts=args.activity_attempts,
        heartbeat_stall_seconds=args.heartbeat_stall,
        approval_sla_seconds=args.approval_sla,
        history_fraction=args.history_fraction,
    )
    tasks = await ctx.tasks()
    try:
        checked, findings = await diagnose(
            tasks, thresholds, task_queue=args.task_queue, query=args.query, limit=args.limit
        )
    except ValueError as err:
        raise CliError(str(err), 2) from None
    for finding in findings:
        print(json.dumps(asdict(finding)) if args.json else finding.line(), file=out)
    if not args.json:
        stuck = len({f.task_id for f in findings})
        verdict = "healthy" if not findings else f"{stuck} need attention"
        print(f"{checked} running task(s) checked: {verdict}", file=out)
    return 1 if findings else 0


async def diagnose(
    tasks: Any,
    thresholds: Thresholds,
    *,
    task_queue: str | None = None,
    query: str | None = None,
    limit: int = 1000,
) -> tuple[int, list[Finding]]:
    """Check the running tasks; returns how many were checked and the findings, by task.

    Raises:
        ValueError: ``task_queue`` cannot be put in a visibility query.
    """
    from agent_worker.client import TASKS_QUERY, queryable

    text = f"{TASKS_QUERY} AND ExecutionStatus = 'Running'"
    if task_queue is not None:
        if not queryable(task_queue):
            raise ValueError(f"task queue {task_queue!r} is not a valid task queue name")
        text += f" AND TaskQueue = '{task_queue}'"
    if query:
        text += f" AND ({query})"
    ids = [e.id async for e in tasks.temporal.list_workflows(text, limit=limit)]
    found = await asyncio.gather(*(_check(tasks, task_id, thresholds) for task_id in ids))
    return len(ids), [f for task in found for f in task]


async def _check(tasks: Any, task_id: str, thresholds: Thresholds) -> list[Finding]:
    from agent_worker.client import AgentWorkerError

    now = datetime.now(UTC)
    description = (await tasks.handle(task_id).describe()).raw_description
    findings = []
    pending_task = description.pending_workflow_task
    if (
        description.HasField("pending_workflow_task")
        and pending_task.attempt >= thresholds.workflow_task_attempts
    ):
        findings.append(
            Finding(
                task_id,
                "workflow-task",
                f"its workflow task failed {pending_task.attempt - 1} times in a row",
                "read the worker log for the failure (a bug or a non-determinism); fix and redeploy, "
                "or reset the task (`temporal workflow reset`)",
            )
        )
    for activity in description.pending_activities:
        name = activity.activity_type.name
        if activity.attempt >= thresholds.activity_attempts:
            last = activity.last_failure.message if activity.HasField("last_failure") else "unknown"
            findings.append(
                Finding(
                    task_id,
                    "activity-retries",
                    f"{name} is on attempt {activity.attempt}: {last}",
                    "fix what it depends on (the failure says what); it retries on its own until its "
                    "attempts run out, then the task hands off",
                )
            )
        started = (
            activity.last_started_time.ToDatetime(UTC) if activity.HasField("last_started_time") else None
        )
        beat = (
            activity.last_heartbeat_time.ToDatetime(UTC) if activity.HasField("last_heartbeat_time") else None
        )
        last_sign = max((t for t in (started, beat) if t is not None), default=None)
        if activity.state == 2 and last_sign is not None:  # PENDING_ACTIVITY_STATE_STARTED
            quiet = (now - last_sign).total_seconds()
            if quiet >= thresholds.heartbeat_stall_seconds:
                findings.append(
                    Finding(
                        task_id,
                        "heartbeat",
                        f"{name} (attempt {activity.attempt}) has not heartbeated for {quiet:.0f} s",
                        "check its worker (alive? hung?); Temporal retries it elsewhere after its "
                        "heartbeat timeout",
                    )
                )
    info = description.workflow_execution_info
    events_at = thresholds.history_fraction * HISTORY_EVENT_LIMIT
    bytes_at = thresholds.history_fraction * HISTORY_BYTES_LIMIT
    if info.history_length >= events_at or info.history_size_bytes >= bytes_at:
        findings.append(
            Finding(
                task_id,
                "history",
                f"its history holds {info.history_length:,} events, {info.history_size_bytes:,} bytes "
                f"(limits {HISTORY_EVENT_LIMIT:,} events, {HISTORY_BYTES_LIMIT:,} bytes)",
                "it continues as new at its next step; a task stuck in one step this long needs a "
                "look at what floods it (signals, follow-ups)",
            )
        )
    try:
        status = await tasks.status(task_id, wait_seconds=5.0)
    except AgentWorkerError as err:
        findings.append(
            Finding(
                task_id, "unreachable", str(err), "start a worker for its task queue, or check its workers"
            )
        )
        return findings
    for request in status.pending:
        waited = (now - request.requested_at).total_seconds()
        overdue = request.deadline <= now
        if overdue or waited >= thresholds.approval_sla_seconds:
            findings.append(
                Finding(
                    task_id,
                    "approval-sla",
                    f"request {request.request_id} ({request.action.tool}) has waited {waited:.0f} s "
                    f"for {', '.join(request.approvers)}" + (" and is past its deadline" if overdue else ""),
                    "remind the approvers (`agent-worker inbox`), or decide it",
                )
            )
    return findings
