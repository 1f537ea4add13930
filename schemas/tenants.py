"""Tenant admission: caps on how many tasks a tenant runs at once."""

from __future__ import annotations

from pydantic import BaseModel


class AdmitInput(BaseModel):
    """Input of ``tenants.admit``."""

    task_id: str
    tenant: str


class AdmitResult(BaseModel):
    """Output of ``tenants.admit``."""

    admitted: bool
    running: int
    cap: int | None = None
    reason: str = ""


class ReleaseInput(BaseModel):
    """Input of ``tenants.release``."""

    task_id: str
