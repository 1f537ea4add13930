"""Re-authorization at commit time: does the approving principal still hold the permission?"""

from __future__ import annotations

from pydantic import BaseModel


class AuthzRequest(BaseModel):
    """Input of ``authz.check``: one approved action about to run."""

    task_id: str
    tenant: str
    principal: str
    tool: str
    version: str
    effect: str


class AuthzDecision(BaseModel):
    """Output of ``authz.check``."""

    allowed: bool
    reason: str = ""
