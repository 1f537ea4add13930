"""Tenant admission: caps on how many tasks a tenant runs at once."""

from __future__ import annotations

from pydantic import BaseModel, Field


class AdmitInput(BaseModel):
    """Input of ``tenants.admit``."""

    task_id: str
    tenant: str
    run_chain: str | None = Field(
        default=None,
        description="The task's run chain: a place held under the same task id by an earlier run "
        "(another chain, ended without releasing) is not this run's (None: by task id alone).",
    )


class AdmitResult(BaseModel):
    """Output of ``tenants.admit``."""

    admitted: bool
    running: int
    cap: int | None = None
    reason: str = ""
    colocated: list[str] = Field(
        default_factory=list,
        description="Roles (`agent`, `sandbox`) whose activities the admitting worker also serves on "
        "the task queue itself: the task schedules them there (`workflows.placement`).",
    )


class ReleaseInput(BaseModel):
    """Input of ``tenants.release``."""

    task_id: str
