"""Temporal Schedules from the command line.

``agent-worker schedule create|list|describe|pause|unpause|trigger|delete``: tasks on a schedule,
through the client's ``AgentWorkerClient.schedules`` (``agent_worker.schedules`` says what a run is
and how its task id is made; docs/schedules.md shows a session). The same ``15m``-style intervals
serve the reaper's and the doctor's own schedules (``reap --schedule``, ``doctor --schedule``),
which ``upsert_schedule`` creates, or replaces when they exist.

Exit codes: 0 done, 1 no such schedule (or one exists already), 2 bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Awaitable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.cli.tasks import load_task_input
from agent_worker.schemas.schedules import OverlapPolicy, TaskSchedule, duration_text
from agent_worker.schemas.validation import describe as describe_error
from agent_worker.schemas.visibility import DEFAULT_TASK_QUEUE
from pydantic import ValidationError
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

if TYPE_CHECKING:
    from agent_worker.schedules import TaskSchedules

__all__ = ["parse_interval", "register", "upsert_schedule"]

T = TypeVar("T")


def parse_interval(text: str, flag: str = "interval") -> timedelta:
    """``90s``, ``15m``, ``2h`` or ``1d`` as a timedelta (``flag`` names it in the error).

    Raises:
        CliError: (exit 2) the text is not such an interval.
    """
    match = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if not match:
        raise CliError(f"{flag} {text!r} must look like 90s, 15m, 2h or 1d", 2)
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
    return timedelta(**{unit: int(match.group(1))})


async def upsert_schedule(
    client: Client, schedule_id: str, run: Any, arg: Any, *, task_queue: str, every: timedelta
) -> None:
    """Create (or replace) the Schedule ``schedule_id`` that starts workflow ``run`` with ``arg`` on
    ``task_queue`` every ``every`` (its runs are ``<schedule_id>-run-<time>``)."""
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(run, arg, id=f"{schedule_id}-run", task_queue=task_queue),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
    )
    try:
        await client.create_schedule(schedule_id, schedule)
    except ScheduleAlreadyRunningError:

        def replace(_: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=schedule)

        await client.get_schedule_handle(schedule_id).update(replace)


def register(sub: Any) -> None:
    """Add ``schedule`` with its actions: create, list, describe, pause, unpause, trigger, delete."""
    schedule = sub.add_parser(
        "schedule", help="run a task on a Temporal Schedule: create, list, describe, pause, unpause, delete"
    )
    actions = schedule.add_subparsers(dest="schedule_action", metavar="ACTION")
    schedule.set_defaults(handler=cmd_list, tenant=None, json=False)  # no action: list them
    create = actions.add_parser("create", help="create a schedule whose every run is a task")
    create.add_argument("name", help="its name; its id is <tenant>/<name> (the spec's tenant)")
    create.add_argument("file", nargs="?", help="TaskSpec (or TaskInput) JSON file, as for start")
    create.add_argument("--example", help="a bundled example's spec instead, e.g. monthly-report")
    create.add_argument("--spec", dest="spec_json", metavar="JSON", help="the TaskSpec as JSON text instead")
    cadence = create.add_mutually_exclusive_group(required=True)
    cadence.add_argument("--every", help="an interval: 90s, 15m, 2h or 1d")
    cadence.add_argument("--cron", help="a cron expression, e.g. '0 9 * * MON-FRI'")
    create.add_argument("--timezone", help="the IANA time zone of --cron (default UTC)")
    create.add_argument(
        "--overlap",
        type=lambda text: text.replace("-", "_"),
        choices=[p.value for p in OverlapPolicy],
        default=OverlapPolicy.SKIP.value,
        help="when a run is due while the last one still runs (default skip)",
    )
    create.add_argument(
        "--catchup-window", metavar="WINDOW", help="how late a missed run may still start, e.g. 10m"
    )
    create.add_argument("--pause-on-failure", action="store_true", help="pause it when a run fails")
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.add_argument("--note", help="a note for people (why it is paused)")
    create.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE, help="the queue its tasks start on")
    create.set_defaults(handler=cmd_create)

    listing = actions.add_parser("list", help="the task schedules, with their state and latest run")
    listing.add_argument("--tenant", help="only this tenant's")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=cmd_list)

    describe = actions.add_parser("describe", help="a schedule: cadence, policy, counts, runs and outcomes")
    describe.add_argument("schedule_id", help="<tenant>/<name>")
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(handler=cmd_describe)

    for action, help_text in (
        ("pause", "start no run until unpaused (runs already started go on)"),
        ("unpause", "start runs again"),
        ("trigger", "start a run now (the overlap policy applies)"),
        ("delete", "delete it (runs already started go on)"),
    ):
        command = actions.add_parser(action, help=help_text)
        command.add_argument("schedule_id", help="<tenant>/<name>")
        if action in ("pause", "unpause"):
            command.add_argument("--note", help="why, for people")
        command.set_defaults(handler=cmd_change, schedule_change=action)


async def _schedules(ctx: CliContext, task_queue: str = DEFAULT_TASK_QUEUE) -> TaskSchedules:
    return (await ctx.tasks(task_queue)).schedules


async def cmd_create(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    task = load_task_input(args.file, args.example, args.spec_json)
    try:
        schedule = TaskSchedule(
            name=args.name,
            spec=task.spec,
            every=parse_interval(args.every, "--every") if args.every else None,
            cron=args.cron,
            timezone=args.timezone,
            overlap=OverlapPolicy(args.overlap),
            catchup_window=parse_interval(args.catchup_window, "--catchup-window")
            if args.catchup_window
            else None,
            pause_on_failure=args.pause_on_failure,
            paused=args.paused,
            note=args.note,
        )
    except ValidationError as err:
        raise CliError(f"schedule: {describe_error(err)}", 2) from None
    from agent_worker.errors import AgentWorkerError

    try:
        schedule_id = await _refusing((await _schedules(ctx, args.task_queue)).create(schedule))
    except AgentWorkerError as err:  # the server refused the cadence: a cron, a time zone
        raise CliError(str(err), 2) from None
    cadence = f"every {args.every}" if args.every else f"on cron {args.cron!r}"
    print(
        f"schedule {schedule_id} starts a task (agent {task.spec.agent}) {cadence} on {args.task_queue}, "
        f"overlap {args.overlap}" + (" (paused)" if args.paused else ""),
        file=out,
    )
    return 0


async def cmd_list(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    views = await _refusing((await _schedules(ctx)).list(args.tenant))
    for view in views:
        if args.json:
            print(view.model_dump_json(), file=out)
            continue
        last = view.recent[-1] if view.recent else None
        print(
            f"{view.schedule_id}  {'paused' if view.paused else 'active'}  {view.cadence()}  "
            f"agent={view.agent}  runs={view.runs}  last={last.task_id if last else '-'}  "
            f"next={view.next_runs[0].isoformat() if view.next_runs and not view.paused else '-'}",
            file=out,
        )
    if not views and not args.json:
        print("no task schedules", file=out)
    return 0


async def cmd_describe(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    view = await _refusing((await _schedules(ctx)).describe(args.schedule_id))
    if args.json:
        print(view.model_dump_json(indent=2), file=out)
        return 0
    window = duration_text(view.catchup_window) if view.catchup_window else "Temporal's default"
    lines = [
        f"schedule {view.schedule_id}  {'paused' if view.paused else 'active'}"
        + (f"  ({view.note})" if view.note else ""),
        f"  task:     agent {view.agent}, tenant {view.tenant}, on {view.task_queue}",
        f"  when:     {view.cadence()}",
        f"  policy:   overlap {view.overlap.value if view.overlap else '-'}, catch-up window {window}"
        + (", pauses on failure" if view.pause_on_failure else ""),
        f"  runs:     {view.runs} started, {view.skipped_overlap} skipped (overlap), "
        f"{view.missed_catchup} missed (catch-up window)",
        f"  running:  {', '.join(view.running) or '-'}",
    ]
    lines += (
        ["  recent:"]
        + [
            f"    {run.task_id}  {run.status or 'unknown'}" + (f" ({run.phase})" if run.phase else "")
            for run in view.recent
        ]
        if view.recent
        else ["  recent:   -"]
    )
    lines.append(f"  next:     {', '.join(t.isoformat() for t in view.next_runs[:3]) or '-'}")
    print("\n".join(lines), file=out)
    return 0


async def cmd_change(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    schedules = await _schedules(ctx)
    action = args.schedule_change
    if action in ("pause", "unpause"):
        await _refusing(getattr(schedules, action)(args.schedule_id, args.note))
    else:
        await _refusing(getattr(schedules, action)(args.schedule_id))
    done = {"pause": "paused", "unpause": "unpaused", "trigger": "triggered", "delete": "deleted"}[action]
    print(f"schedule {args.schedule_id} {done}", file=out)
    return 0


async def _refusing(call: Awaitable[T]) -> T:
    """``call``'s answer; a schedule the client cannot find or create is this command's error."""
    from agent_worker.schedules import ScheduleExists, ScheduleNotFound

    try:
        return await call
    except (ScheduleNotFound, ScheduleExists) as err:
        raise CliError(str(err), 1) from None
