"""``notify.send``: one notification through every configured notifier, once each."""

from __future__ import annotations

import asyncio
import shlex
from typing import Protocol

from agent_worker.activities.errors import activity_boundary
from agent_worker.activities.notify.email import EmailNotifier
from agent_worker.activities.notify.ledger import NotificationLedger
from agent_worker.activities.notify.webhook import WebhookNotifier
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.notify import NotifyInput, NotifyResult
from temporalio import activity


class Notifier(Protocol):
    """A way to reach people (``channel`` names it in the ledger and the result)."""

    channel: str

    async def send(self, note: NotifyInput, text: str) -> None: ...

    def unaddressed(self, note: NotifyInput) -> list[str]:
        """The recipients this notifier has no address for (so it cannot reach)."""
        ...


def message_text(note: NotifyInput) -> str:
    """What a person reads: which request, for whom, until when, and how to decide it (or which
    budget passed its soft limit)."""
    if note.budget is not None:
        notice = note.budget
        return "\n".join(
            [
                f"Budget notice: {notice.budget} is past {notice.soft_limit:.0%} of its limit.",
                f"Task {note.task_id} (agent {note.agent}, tenant {note.tenant}) has used "
                f"{notice.used:g} of {notice.limit:g}; for {', '.join(note.recipients)}.",
                f"It goes on; at the limit it stops, or asks for an extension: agent-worker status "
                f"{shlex.quote(note.task_id)}",
            ]
        )
    assert note.deadline is not None
    opening = {
        "reminder": "Reminder: an approval request is still waiting",
        "escalation": "Escalated to you: an approval request nobody has decided yet",
    }[note.kind]
    lines = [
        f"{opening}.",
        f"Task {note.task_id} (agent {note.agent}, tenant {note.tenant}) asks to run {note.tool}.",
        f"Request {note.request_id}, version {note.version}; for {', '.join(note.recipients)}.",
        f"Decide before {note.deadline.isoformat()}: agent-worker approve {shlex.quote(note.task_id)} "
        f"--request {note.request_id} --version {note.version} --as <you>",
    ]
    if note.reason:
        lines.append(f"Why it needs approval: {note.reason}")
    return "\n".join(lines)


def build_notifiers(config: WorkerConfig) -> list[Notifier]:
    """The notifiers ``config`` names (none: notifications are recorded as events only)."""
    notifiers: list[Notifier] = []
    if config.notify_webhook_url is not None:
        notifiers.append(WebhookNotifier(config.notify_webhook_url.get_secret_value()))
    if config.notify_smtp_url is not None:
        notifiers.append(
            EmailNotifier(
                config.notify_smtp_url.get_secret_value(), config.notify_email_from, config.notify_emails
            )
        )
    return notifiers


class NotifyActivities:
    """``notify.send`` over the worker's notifiers and one ledger."""

    def __init__(self, notifiers: list[Notifier], ledger: NotificationLedger) -> None:
        self.notifiers = notifiers
        self.ledger = ledger

    @activity.defn(name="notify.send")
    @activity_boundary
    async def send(self, input: NotifyInput) -> NotifyResult:
        """Deliver ``input`` through each notifier that has not taken its key yet, recording each one
        as it takes it: a retry (one notifier down, a worker lost) sends only what is missing."""
        result = NotifyResult()
        text = message_text(input)
        for notifier in self.notifiers:
            if await asyncio.to_thread(self.ledger.taken, input.key, notifier.channel):
                result.repeated.append(notifier.channel)
                continue
            await notifier.send(input, text)
            await asyncio.to_thread(self.ledger.record, input.key, notifier.channel)
            result.sent.append(notifier.channel)
            result.unaddressed += [p for p in notifier.unaddressed(input) if p not in result.unaddressed]
        return result
