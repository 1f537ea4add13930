"""``agent-worker doctor``: find the tasks that are stuck (and the task schedules whose runs keep
failing), and say why and what to do.

The checks are ``activities.health``'s (``diagnose``; its docstring lists them): the same ones the
scheduled ``FleetDoctor`` workflow runs (``--schedule 15m`` sets that up instead of checking now).

Exit status: 0 when every task is healthy, 1 when a finding is listed (for cron and CI), 2 when the
check itself could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.cli.schedules import parse_interval, upsert_schedule
from agent_worker.schemas.health import DoctorInput, Thresholds

__all__ = ["DOCTOR_SCHEDULE_ID", "register"]

DOCTOR_SCHEDULE_ID = "agent-worker-doctor"


def register(sub: Any) -> None:
    """Add ``doctor``."""
    doctor = sub.add_parser(
        "doctor",
        help="find stuck tasks (failing workflow tasks, retries, SLAs, history) and failing schedules",
    )
    doctor.add_argument("--task-queue", help="only the tasks of this task queue")
    doctor.add_argument("--query", help="a visibility query narrowing the running tasks further")
    defaults = Thresholds()
    doctor.add_argument("--workflow-task-attempts", type=int, default=defaults.workflow_task_attempts)
    doctor.add_argument("--activity-attempts", type=int, default=defaults.activity_attempts)
    doctor.add_argument("--heartbeat-stall", type=float, default=defaults.heartbeat_stall_seconds)
    doctor.add_argument("--approval-sla", type=float, default=defaults.approval_sla_seconds, help="seconds")
    doctor.add_argument("--history-fraction", type=float, default=defaults.history_fraction)
    doctor.add_argument(
        "--schedule-failures",
        type=int,
        default=defaults.schedule_failures,
        help="name a task schedule whose last this many finished runs failed (default 3)",
    )
    doctor.add_argument("--limit", type=int, default=1000, help="check at most this many tasks")
    doctor.add_argument("--json", action="store_true", help="one JSON finding per line")
    doctor.add_argument(
        "--schedule",
        metavar="EVERY",
        help="instead, run these checks on a Temporal Schedule (workflow FleetDoctor), e.g. 15m",
    )
    doctor.set_defaults(handler=cmd_doctor)


async def cmd_doctor(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        check = DoctorInput(
            thresholds=Thresholds(
                workflow_task_attempts=args.workflow_task_attempts,
                activity_attempts=args.activity_attempts,
                heartbeat_stall_seconds=args.heartbeat_stall,
                approval_sla_seconds=args.approval_sla,
                history_fraction=args.history_fraction,
                schedule_failures=args.schedule_failures,
            ),
            task_queue=args.task_queue,
            query=args.query,
            limit=args.limit,
        )
    except ValueError as err:
        raise CliError(f"doctor: {err}", 2) from None
    client = await ctx.temporal()
    if args.schedule:
        from agent_worker.workflows import FleetDoctorWorkflow

        every = parse_interval(args.schedule)
        queue = ctx.config.task_queue
        await upsert_schedule(
            client, DOCTOR_SCHEDULE_ID, FleetDoctorWorkflow.run, check, task_queue=queue, every=every
        )
        print(f"schedule {DOCTOR_SCHEDULE_ID} runs FleetDoctor every {args.schedule} on {queue}", file=out)
        return 0
    from agent_worker.activities.health import diagnose  # the activity's checks, loaded only when this runs

    try:
        report = await diagnose(client, check)
    except ValueError as err:
        raise CliError(str(err), 2) from None
    for finding in report.findings:
        print(json.dumps(finding.model_dump(mode="json")) if args.json else finding.line(), file=out)
    if not args.json:
        print(report.verdict(), file=out)
    return 0 if report.healthy else 1
