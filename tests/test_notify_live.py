"""The notifiers against real services, when credentials are given (skipped otherwise: this machine
has no internet). ``AGENT_WORKER_LIVE_WEBHOOK_URL``: a Slack incoming webhook (or any receiver that
answers 2xx); ``AGENT_WORKER_LIVE_SMTP_URL`` with ``AGENT_WORKER_LIVE_EMAIL_TO``: an SMTP server (with
``smtps://`` or ``smtp://user:password@host:587`` as the server asks) and a mailbox to deliver to.
The same ``notify.send`` the workflows call, through its ledger: sent once, then repeated, not sent."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from agent_worker.activities.notify import EmailNotifier, NotifyActivities, WebhookNotifier
from agent_worker.activities.notify.activities import Notifier
from agent_worker.activities.notify.ledger import SqliteNotificationLedger
from agent_worker.schemas.notify import NotifyInput
from temporalio.testing import ActivityEnvironment


def reminder() -> NotifyInput:
    return NotifyInput(
        key=f"live-{uuid.uuid4().hex}",
        kind="reminder",
        task_id="live-notify-test",
        tenant="default",
        agent="monthly-report",
        request_id="req-1",
        tool="submit_report",
        version="sha256:" + "0" * 64,
        recipients=["live-recipient"],
        deadline=datetime.now(UTC) + timedelta(hours=1),
        reason="a live test of agent-worker's notifier",
    )


async def send_twice(notifier: Notifier, tmp_path: Path) -> None:
    activities = NotifyActivities([notifier], SqliteNotificationLedger(tmp_path / "notifications.db"))
    note = reminder()
    first = await ActivityEnvironment().run(activities.send, note)
    assert first.sent == [notifier.channel] and first.unaddressed == []
    again = await ActivityEnvironment().run(activities.send, note)
    assert again.sent == [] and again.repeated == [notifier.channel]


@pytest.mark.skipif(
    not os.environ.get("AGENT_WORKER_LIVE_WEBHOOK_URL"),
    reason="needs AGENT_WORKER_LIVE_WEBHOOK_URL (a real Slack incoming webhook or receiver)",
)
async def test_live_webhook_takes_a_reminder_once(tmp_path: Path) -> None:
    await send_twice(WebhookNotifier(os.environ["AGENT_WORKER_LIVE_WEBHOOK_URL"]), tmp_path)


@pytest.mark.skipif(
    not (os.environ.get("AGENT_WORKER_LIVE_SMTP_URL") and os.environ.get("AGENT_WORKER_LIVE_EMAIL_TO")),
    reason="needs AGENT_WORKER_LIVE_SMTP_URL and AGENT_WORKER_LIVE_EMAIL_TO (a real SMTP server)",
)
async def test_live_smtp_takes_a_reminder_once(tmp_path: Path) -> None:
    notifier = EmailNotifier(
        os.environ["AGENT_WORKER_LIVE_SMTP_URL"],
        os.environ.get("AGENT_WORKER_LIVE_EMAIL_FROM", "agent-worker@localhost"),
        {"live-recipient": os.environ["AGENT_WORKER_LIVE_EMAIL_TO"]},
    )
    await send_twice(notifier, tmp_path)
