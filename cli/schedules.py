"""Temporal Schedules the CLI sets up (the sandbox reaper, the fleet doctor): an interval parsed from
``15m``-style text, and a schedule created, or replaced when it exists."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

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

from cli.errors import CliError

__all__ = ["parse_interval", "upsert_schedule"]


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
