"""Approval SLAs (a policy rule's ``sla``): reminders and escalation to a next approver group on the
task's durable timers, notified through a webhook (Slack-compatible body) and email over SMTP, once
each, across a worker SIGKILLed between them; at the deadline the model is told "expired,
unanswered" (never "rejected") and the task follows the rule: go on without the action, or hand
off. The receivers are real servers on loopback (an HTTP server, ``aiosmtpd``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.notify import EmailNotifier, NotifyActivities, WebhookNotifier
from agent_worker.activities.notify.ledger import SqliteNotificationLedger
from agent_worker.cli.devserver import free_port
from agent_worker.schemas.notify import NotifyInput
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.schemas.validation import InvalidPayload, parse_task_input
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.helpers.receivers import SmtpReceiver, smtp_receiver, webhook_receiver
from tests.helpers.support import TaskEnv, assert_replays, example_spec, spawn_worker, until

EMAILS = {"finance-lead": "fl@example.com", "cfo": "cfo@example.com"}


def with_sla(**sla: Any) -> dict[str, Any]:
    """The example task, its approval rule given ``sla``."""
    spec = example_spec()
    [rule] = [r for r in spec["policy"]["rules"] if r.get("tool") == "submit_report"]
    rule["sla"] = sla
    return spec


def event_types(status: Any) -> list[str]:
    return [e.type.value for e in status.last_events]


async def completed_notifications(handle: Any) -> int:
    """``notify.send`` activities the server has recorded as completed (no worker needed to ask)."""
    history = json.loads((await handle.fetch_history()).to_json())["events"]
    scheduled = {
        e["eventId"]
        for e in history
        if e.get("activityTaskScheduledEventAttributes", {}).get("activityType", {}).get("name")
        == "notify.send"
    }
    return sum(
        e.get("activityTaskCompletedEventAttributes", {}).get("scheduledEventId") in scheduled
        for e in history
    )


async def test_reminder_and_escalation_arrive_once_each_across_a_worker_kill_and_expiry_tells_the_model(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """Remind at 10 s, escalate to cfo at 20 s, expire at 30 s and go on: the webhook and the SMTP
    server each get one reminder (for finance-lead) and one escalation (for cfo), although the worker
    that sent the reminder is SIGKILLed before the escalation; the model's next input says
    "expired, unanswered", nothing is written, and the history replays."""
    with webhook_receiver() as hook, smtp_receiver() as smtp:
        notify_env = {
            "AGENT_WORKER_NOTIFY_WEBHOOK_URL": hook.url,
            "AGENT_WORKER_NOTIFY_SMTP_URL": smtp.url,
            "AGENT_WORKER_NOTIFY_EMAILS": ",".join(f"{p}={a}" for p, a in EMAILS.items()),
        }
        first = spawn_worker(config_env, tmp_path / "worker-1.log", **notify_env)
        spec = with_sla(
            remind_after_seconds=10,
            escalate_after_seconds=20,
            escalate_to=["cfo"],
            expire_after_seconds=30,
            on_expiry="continue",
        )
        handle = await config_env.start(spec)
        second = None
        try:
            await until(lambda: hook.kinds() == ["reminder"], 60, "the reminder")
            await until(lambda: completed_notifications(handle), 30, "the reminder's completion")
            os.killpg(first.pid, signal.SIGKILL)
            await asyncio.to_thread(first.wait, 10)
            second = spawn_worker(config_env, tmp_path / "worker-2.log", **notify_env)
            result: TaskResult = await asyncio.wait_for(handle.result(), 90)
            status = await handle.query(AgentTaskWorkflow.status)  # while a worker runs to answer
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)

        assert hook.kinds() == ["reminder", "escalation"]
        [(reminder_key, reminder), (escalation_key, escalation)] = hook.posts
        assert reminder_key != escalation_key and reminder_key.endswith("/req-1/reminder")
        assert reminder["agent_worker"]["recipients"] == ["finance-lead"]
        assert escalation["agent_worker"]["recipients"] == ["cfo"]
        assert "Reminder" in reminder["text"] and handle.id in reminder["text"]  # Slack shows 'text'
        assert [to for to, _ in smtp.messages] == [["fl@example.com"], ["cfo@example.com"]]
        assert [m["Subject"].split(":")[0] for _, m in smtp.messages] == [
            "[agent-worker] reminder",
            "[agent-worker] escalation",
        ]
        assert len({m["Message-ID"] for _, m in smtp.messages}) == 2

    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output and "expired, unanswered" in result.final_output
    assert "rejected" not in result.final_output
    assert result.evidence.writes == [] and config_env.business().count() == 0
    types = event_types(status)
    assert types.count("approval.reminded") == 1 and types.count("approval.escalated") == 1
    assert "approval.expired" in types and "approval.decided" not in types
    [escalated] = [e for e in status.last_events if e.type.value == "approval.escalated"]
    assert escalated.data["approvers"] == ["finance-lead", "cfo"] and escalated.data["sent"] == [
        "webhook",
        "email",
    ]
    await assert_replays(config_env.client, handle.id)


async def test_after_escalation_the_next_group_may_decide_and_before_it_may_not(env: TaskEnv) -> None:
    """cfo's approval before the escalation is ignored (not an approver yet); after it, cfo's
    approval runs the write. No notifier is configured: the events still say who was notified."""
    handle = await env.start(with_sla(escalate_after_seconds=3, escalate_to=["cfo"]))
    [request] = (await env.awaiting_approval(handle)).pending
    early = {
        "request_id": request.request_id,
        "version": request.version,
        "decision": "approve",
        "principal": "cfo",
    }
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(AgentTaskWorkflow.decide, early)
    assert "cfo" in str(refused.value.cause)
    status = await env.wait_status(handle, lambda s: "approval.escalated" in event_types(s), within=30)
    assert status.pending[0].approvers == ["finance-lead", "cfo"]
    [escalated] = [e for e in status.last_events if e.type.value == "approval.escalated"]
    assert escalated.data["notified"] is True and escalated.data["sent"] == []
    outcome = await handle.execute_update(AgentTaskWorkflow.decide, early)
    assert outcome.accepted is True
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and len(result.evidence.writes) == 1
    assert result.evidence.approvals[0].principal == "cfo"
    await assert_replays(env.client, handle.id)


async def test_expiry_under_a_hand_off_rule_hands_off_saying_expired_unanswered(env: TaskEnv) -> None:
    handle = await env.start(with_sla(expire_after_seconds=3, on_expiry="hand_off"))
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and "expired, unanswered" in result.reason and "rejected" not in result.reason
    assert env.business().count() == 0
    await assert_replays(env.client, handle.id)


def note(key: str = "t-1/chain/req-1/reminder") -> NotifyInput:
    return NotifyInput(
        key=key,
        kind="reminder",
        task_id="t-1",
        tenant="acme",
        agent="monthly-report",
        request_id="req-1",
        tool="submit_report",
        version="sha256:" + "0" * 64,
        recipients=["finance-lead", "nobody"],
        deadline="2026-12-04T00:00:00Z",  # type: ignore[arg-type]
    )


async def test_a_retried_send_delivers_only_what_a_notifier_has_not_taken(tmp_path: Path) -> None:
    """The webhook takes the reminder, the SMTP server is down: the attempt fails (retryable); the
    retry, with SMTP up, emails it and does not POST it again. A principal without an address is
    reported, not guessed."""
    with webhook_receiver() as hook:
        port = free_port()  # nothing listens there yet
        notifiers = [
            WebhookNotifier(hook.url),
            EmailNotifier(f"smtp://127.0.0.1:{port}", "aw@localhost", EMAILS),
        ]
        activities = NotifyActivities(notifiers, SqliteNotificationLedger(tmp_path / "ledger.db"))
        with pytest.raises(ApplicationError) as failed:
            await ActivityEnvironment().run(activities.send, note())
        assert failed.value.non_retryable is False and f"127.0.0.1:{port}" in failed.value.message
        assert len(hook.posts) == 1
        with smtp_receiver(port) as smtp:
            result = await ActivityEnvironment().run(activities.send, note())
            again = await ActivityEnvironment().run(activities.send, note())
        _assert_one_email(smtp)
        assert (result.sent, result.repeated, result.unaddressed) == (["email"], ["webhook"], ["nobody"])
        assert (again.sent, again.repeated) == ([], ["webhook", "email"])
        assert len(hook.posts) == 1


async def test_a_webhook_that_refuses_is_not_retried_and_one_that_is_down_is(tmp_path: Path) -> None:
    with webhook_receiver() as hook:
        activities = NotifyActivities(
            [WebhookNotifier(hook.url)], SqliteNotificationLedger(tmp_path / "l.db")
        )
        for status, retried in ((404, False), (503, True), (429, True)):
            hook.status = status
            with pytest.raises(ApplicationError) as failed:
                await ActivityEnvironment().run(activities.send, note(f"k-{status}"))
            assert failed.value.non_retryable is (not retried) and str(status) in failed.value.message


def test_an_sla_that_escalates_to_nobody_is_refused_naming_the_field() -> None:
    spec = with_sla(escalate_after_seconds=5)
    with pytest.raises(InvalidPayload) as refused:
        parse_task_input({"spec": spec})
    assert "escalate_to" in str(refused.value)
    allow = example_spec()
    allow["policy"]["rules"][1]["sla"] = {"remind_after_seconds": 5}
    with pytest.raises(InvalidPayload) as refused:
        parse_task_input({"spec": allow})
    assert "require_approval" in str(refused.value)


def _assert_one_email(smtp: SmtpReceiver) -> None:
    [(to, message)] = smtp.messages
    assert to == ["fl@example.com"] and "submit_report" in str(message["Subject"])
