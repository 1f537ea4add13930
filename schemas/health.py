"""Fleet health (``agent-worker doctor`` and the scheduled ``FleetDoctor`` workflow): when a running
task counts as stuck (and a task schedule as failing), what was found, and the report of one check."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class Thresholds(BaseModel):
    """When a task counts as stuck."""

    model_config = ConfigDict(extra="forbid")

    workflow_task_attempts: int = Field(default=3, ge=1)
    activity_attempts: int = Field(default=5, ge=1)
    heartbeat_stall_seconds: float = Field(default=120.0, gt=0)
    approval_sla_seconds: float = Field(default=24 * 3600.0, gt=0)
    history_fraction: float = Field(default=0.8, gt=0, le=1)
    schedule_failures: int = Field(
        default=3, ge=1, description="A task schedule whose last this many finished runs failed."
    )


class Finding(BaseModel):
    """One reason a task needs attention, and what to do about it."""

    task_id: str
    check: str = Field(
        description="workflow-task, activity-retries, heartbeat, approval-sla, history, unreachable "
        "or schedule-runs."
    )
    detail: str
    advice: str
    schedule_id: str | None = Field(
        default=None, description="For schedule-runs: the schedule (task_id is its newest failed run)."
    )

    def line(self) -> str:
        where = f"schedule {self.schedule_id}" if self.schedule_id else self.task_id
        return f"{where}  {self.check}: {self.detail} -> {self.advice}"


class DoctorInput(BaseModel):
    """What one check looks at: the running tasks (of ``task_queue``, narrowed by ``query``)."""

    model_config = ConfigDict(extra="forbid")

    thresholds: Thresholds = Field(default_factory=Thresholds)
    task_queue: str | None = None
    query: str | None = Field(default=None, description="A visibility query narrowing the tasks further.")
    limit: int = Field(default=1000, ge=1, le=100_000)


class DoctorReport(BaseModel):
    """What one check found: how many running tasks it checked and the findings, by task."""

    checked: int
    findings: list[Finding] = Field(default_factory=list)
    at: datetime | None = None
    schedules_checked: int = Field(default=0, description="Task schedules checked (schedule-runs).")

    @property
    def healthy(self) -> bool:
        return not self.findings

    def verdict(self) -> str:
        stuck = len({f.schedule_id or f.task_id for f in self.findings})
        schedules = f" and {self.schedules_checked} task schedule(s)" if self.schedules_checked else ""
        return f"{self.checked} running task(s){schedules} checked: " + (
            "healthy" if self.healthy else f"{stuck} need attention"
        )
