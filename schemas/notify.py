"""Notifications a task sends about its approval requests (reminders, escalations) and its budgets
(a soft limit passed): the input of the ``notify.send`` activity and what it reports back."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

NotificationKind = Literal["reminder", "escalation", "budget"]


class BudgetNotice(BaseModel):
    """A budget past its soft limit: what a ``budget`` notification says."""

    budget: str
    limit: float
    used: float
    soft_limit: float


class NotifyInput(BaseModel):
    """One notification about one request (or, kind ``budget``, one budget). ``key`` names it for good
    (task id, run chain, request or budget, kind): a retried or repeated send under the same key is not
    sent again, and receivers get it as the webhook's ``Idempotency-Key`` header and the email's
    ``Message-ID``."""

    key: str = Field(min_length=1, max_length=512)
    kind: NotificationKind
    task_id: str
    tenant: str
    agent: str
    request_id: str = ""
    tool: str = ""
    version: str = ""
    recipients: list[str] = Field(
        description="The principals it is for (the request's approvers, or the group escalated to)."
    )
    deadline: datetime | None = None
    reason: str = ""
    budget: BudgetNotice | None = None


class NotifyResult(BaseModel):
    """Which notifiers took it (``webhook``, ``email``), which had it already (``repeated``: sent
    under this key before, not sent again), and recipients with no address."""

    sent: list[str] = Field(default_factory=list)
    repeated: list[str] = Field(default_factory=list)
    unaddressed: list[str] = Field(default_factory=list)
