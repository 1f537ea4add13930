"""Scheduled tasks (``agent-worker schedule``, ``AgentWorkerClient.schedules``): what a schedule is
made of (``TaskSchedule``) and what reading one answers (``ScheduleView``).

A schedule is a Temporal Schedule whose action starts an ``AgentTask`` with a ``TaskSpec``, so each
run is a normal task: its budgets, policy, approvals and evidence are the spec's. Its id is its name
scoped to the spec's tenant, ``<tenant>/<name>``, as the HTTP API scopes a task id a caller chooses.
Each run's task id is the schedule id and the time the run was scheduled for, which Temporal appends:
``acme/nightly-2026-12-05T09:00:00Z``. That id is unique per scheduled time, stable (a run is never
started twice for one time), and inside the tenant's own ids.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum

from agent_worker.schemas.tasks import TaskSpec
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "MIN_CATCHUP_WINDOW",
    "MIN_INTERVAL",
    "SCHEDULE_NAME_PATTERN",
    "OverlapPolicy",
    "ScheduleView",
    "ScheduledRun",
    "TaskSchedule",
    "duration_text",
    "scoped_schedule_id",
]

# A name is what follows ``<tenant>/``: the run ids add 21 characters (``-2026-12-05T09:00:00Z``)
# and stay within a task id's 200 (64 for the tenant, 1, 100, 21).
SCHEDULE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$"
MIN_INTERVAL = timedelta(seconds=1)
# Temporal raises a shorter catch-up window to 10 s without saying so; refusing it says so.
MIN_CATCHUP_WINDOW = timedelta(seconds=10)


class OverlapPolicy(StrEnum):
    """What a run whose time comes while the previous run still runs does (Temporal's policies)."""

    SKIP = "skip"  # start nothing (the default)
    BUFFER_ONE = "buffer_one"  # start it once the running one ends; at most one waits
    BUFFER_ALL = "buffer_all"  # start each, in turn, once the one before ends
    CANCEL_OTHER = "cancel_other"  # cancel the running one (it cleans up), then start
    TERMINATE_OTHER = "terminate_other"  # terminate the running one (no clean-up), then start
    ALLOW_ALL = "allow_all"  # start it alongside


def scoped_schedule_id(tenant: str, name: str) -> str:
    """``<tenant>/<name>``, or ``name`` unchanged when it is that already (the API's rule for ids)."""
    return name if name.startswith(f"{tenant}/") else f"{tenant}/{name}"


class TaskSchedule(BaseModel):
    """A schedule to create: the task each run starts, when, and what overlapping runs do."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description="The schedule's name within the tenant (or its whole id, '<tenant>/<name>'): "
        "1 to 100 characters from A-Z a-z 0-9 . _ : -, beginning with a letter or digit."
    )
    spec: TaskSpec = Field(description="The task each run starts, as `agent-worker start` takes it.")
    every: timedelta | None = Field(default=None, description="Run at this interval (at least 1 s).")
    cron: str | None = Field(
        default=None, min_length=1, description="Or run on this cron expression, e.g. '0 9 * * MON-FRI'."
    )
    timezone: str | None = Field(
        default=None, description="The IANA time zone the cron expression is read in (default UTC)."
    )
    overlap: OverlapPolicy = OverlapPolicy.SKIP
    catchup_window: timedelta | None = Field(
        default=None,
        description="How late a run missed while Temporal was unavailable may still start (at least "
        "10 s); None: Temporal's default, one year.",
    )
    pause_on_failure: bool = Field(default=False, description="Pause the schedule when a run fails.")
    paused: bool = Field(default=False, description="Create it paused.")
    note: str | None = Field(default=None, max_length=1000, description="Why it is paused, for people.")

    @model_validator(mode="after")
    def _checked(self) -> TaskSchedule:
        name = self.name.removeprefix(f"{self.spec.tenant}/")
        if not re.fullmatch(SCHEDULE_NAME_PATTERN, name):
            raise ValueError(
                f"name {self.name!r} must be 1 to 100 characters from A-Z a-z 0-9 . _ : -, beginning "
                "with a letter or digit (optionally after '<tenant>/' of the spec's tenant)"
            )
        if (self.every is None) == (self.cron is None):
            raise ValueError("give exactly one of 'every' (an interval) and 'cron' (a cron expression)")
        if self.every is not None and self.every < MIN_INTERVAL:
            raise ValueError(f"every must be at least {MIN_INTERVAL.total_seconds():g} s")
        if self.timezone is not None and self.cron is None:
            raise ValueError("timezone applies to a cron expression; an interval runs in UTC")
        if self.catchup_window is not None and self.catchup_window < MIN_CATCHUP_WINDOW:
            raise ValueError(
                f"catchup_window must be at least {MIN_CATCHUP_WINDOW.total_seconds():g} s "
                "(Temporal's minimum)"
            )
        return self

    @property
    def schedule_id(self) -> str:
        """The schedule's id: ``<tenant>/<name>``."""
        return scoped_schedule_id(self.spec.tenant, self.name)


class ScheduledRun(BaseModel):
    """One run a schedule started: a task."""

    task_id: str
    scheduled_at: datetime
    started_at: datetime | None = None
    status: str | None = Field(
        default=None, description="Its workflow's status: running, completed, failed, timed_out, ..."
    )
    phase: str | None = Field(default=None, description="The task's phase, as its search attribute says.")


class ScheduleView(BaseModel):
    """A scheduled task as ``list`` and ``describe`` read it."""

    schedule_id: str
    tenant: str | None = None
    agent: str | None = None
    task_queue: str | None = None
    every: list[timedelta] = Field(default_factory=list)
    cron: str | None = None
    timezone: str | None = None
    overlap: OverlapPolicy | None = None
    catchup_window: timedelta | None = None
    pause_on_failure: bool = False
    paused: bool = False
    note: str | None = None
    runs: int = Field(default=0, description="Runs started so far.")
    skipped_overlap: int = Field(default=0, description="Runs not started because one still ran.")
    missed_catchup: int = Field(default=0, description="Runs not started: past the catch-up window.")
    running: list[str] = Field(default_factory=list, description="The task ids of its runs still running.")
    recent: list[ScheduledRun] = Field(default_factory=list, description="Its latest runs, oldest first.")
    next_runs: list[datetime] = Field(default_factory=list)

    def cadence(self) -> str:
        """``every 2s`` or ``cron '0 9 * * *' (Europe/Paris)``, for people."""
        if self.cron is not None:
            return f"cron {self.cron!r}" + (f" ({self.timezone})" if self.timezone else "")
        return ", ".join(f"every {duration_text(e)}" for e in self.every) or "(no interval or cron)"


def duration_text(value: timedelta) -> str:
    """``2s``, ``15m``, ``2h``, ``1d``: the largest whole unit."""
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
