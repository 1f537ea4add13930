"""Approvals and effects at their edges: a cancel during a write, an edit the tool refuses, a revoked
approver, a decision no worker hears, and a tool the agent does not have."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from agent_worker.activities.authz import SqliteAuthorizer
from agent_worker.activities.business import SqliteBusinessStore
from agent_worker.activities.events import JsonlEventSink
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.schemas.writes import WriteInput, WriteReceipt
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError

from tests.helpers.revocation import approve_then_revoke, approved_write
from tests.helpers.support import TaskEnv, assert_replays, example_spec, make_config, running_worker
from tests.test_signed_approvals import signed_spec


async def test_a_tool_the_agent_does_not_have_goes_back_to_the_model_as_a_tool_error(env: TaskEnv) -> None:
    """A call to a tool the agent lacks does not fail the task: the model is told, and answers."""
    handle = await env.start({"agent": "hallucinator", "prompt": "tidy the ledger"})
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    assert result.final_output and "the missing tool said:" in result.final_output
    assert "wipe_ledger" in result.final_output and "not found" in result.final_output
    await assert_replays(env.client, handle.id)


def only_approver_policy() -> dict:
    spec = approved_write("reapprove")
    spec["policy"]["rules"][0]["approvers"] = ["clerk"]
    return spec


async def test_a_revoked_sole_approver_hands_the_task_off_instead_of_being_asked_again(
    revocable_env: TaskEnv,
) -> None:
    """The request does not re-open to the principal who lost the permission; with no one else left
    to decide, the task ends handed off, saying why, and nothing is written."""
    env = revocable_env
    handle = await env.start(only_approver_policy())
    await approve_then_revoke(env, handle, "clerk")
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and "left the finance team" in result.reason and "clerk" in result.reason
    assert env.business().count() == 0
    await assert_replays(env.client, handle.id)


async def test_a_revoked_approver_cannot_decide_the_request_it_reopened(revocable_env: TaskEnv) -> None:
    """The re-opened request lists only the approvers still allowed; the revoked one's approval is
    refused before history, and the request stays open for the others."""
    env = revocable_env
    handle = await env.start(approved_write("reapprove"))
    await approve_then_revoke(env, handle, "clerk")
    status = await env.wait_status(handle, lambda s: [r.request_id for r in s.pending] == ["req-2"])
    [request] = status.pending
    assert request.approvers == ["supervisor"]
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(
            AgentTaskWorkflow.decide,
            {
                "request_id": request.request_id,
                "version": request.version,
                "decision": "approve",
                "principal": "clerk",
            },
        )
    assert "clerk" in str(refused.value.cause)
    status = await handle.query(AgentTaskWorkflow.status)
    assert [r.request_id for r in status.pending] == ["req-2"]
    SqliteAuthorizer(env.config.authz_db).grant("clerk", "record_value")  # even restored: not its call
    await env.approve(handle, principal="supervisor")
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    assert env.business().count() == 1
    await assert_replays(env.client, handle.id)


class SlowAnswerWriter(SqliteBusinessStore):
    """Commits at once, then takes seconds to answer: a write still in flight after its row exists."""

    def write(self, input: WriteInput) -> WriteReceipt:
        receipt = super().write(input)
        time.sleep(3)
        return receipt


def slow_answer_writer(config: WorkerConfig) -> SlowAnswerWriter:
    return SlowAnswerWriter(config.business_db)


async def test_a_write_committed_while_the_task_is_cancelled_is_in_its_events(
    client: Client, tmp_path: Path
) -> None:
    """Cancelled after the row is committed but before the write answers: the task still ends
    cancelled, and its events (status and sink) record the committed write with its record id."""
    config = make_config(
        tmp_path / "data", business_writer="tests.test_approvals_and_effects:slow_answer_writer"
    )
    env = TaskEnv(client=client, config=config, address="")
    async with running_worker(client, config):
        handle = await env.start(
            {
                "agent": "recorder",
                "prompt": "record: paid-invoice-9",
                "policy": {
                    "rules": [
                        {"tool": "record_value", "decision": "require_approval", "approvers": ["clerk"]}
                    ]
                },
            }
        )
        await env.approve(handle, principal="clerk")
        deadline = time.monotonic() + 30
        while env.business().count() == 0:
            assert time.monotonic() < deadline, "the write never committed"
            await asyncio.sleep(0.05)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
        status = await handle.query(AgentTaskWorkflow.status)
    assert status.phase is TaskPhase.CANCELLED
    assert env.business().count() == 1
    [confirmed] = [e for e in status.last_events if e.type.value == "write.confirmed"]
    assert confirmed.data["outcome"] == "committed" and confirmed.data["record_id"]
    stored = [
        e for e in JsonlEventSink(config.events_dir).read(handle.id) if e.type.value == "write.confirmed"
    ]
    assert [e.data["record_id"] for e in stored] == [confirmed.data["record_id"]]
    await assert_replays(client, handle.id)


async def test_an_edit_the_tool_refuses_is_refused_to_the_cli_and_the_request_stays_open(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agent-worker edit` with a value the tool's planner refuses exits 1 with the tool's reason; the
    request still waits, an event says why, and a valid decision then completes the task."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    args = ["--address", env.address]
    decide = [handle.id, "--request", request.request_id, "--version", request.version]
    edit = [*args, "edit", *decide, "--as", "finance-lead", "--args", '{"month": "June"}']
    assert await asyncio.to_thread(cli_main, edit) == 1
    assert "month must look like YYYY-MM" in capsys.readouterr().err
    status = await handle.query(AgentTaskWorkflow.status)
    assert [r.request_id for r in status.pending] == [request.request_id]
    assert any(
        e.type.value == "approval.ignored" and "month must look like" in e.data["reason"]
        for e in status.last_events
    )
    assert await asyncio.to_thread(cli_main, [*args, "approve", *decide, "--as", "finance-lead"]) == 0
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and len(result.evidence.writes) == 1
    await assert_replays(env.client, handle.id)


async def test_a_signalled_edit_the_tool_refuses_puts_the_action_up_for_a_decision_again(
    env: TaskEnv,
) -> None:
    """A signal cannot be answered, so the edit is recorded; when the tool refuses it, an event says
    why and the same approvers are asked again (nothing written, nothing silently dropped)."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    await handle.signal(
        AgentTaskWorkflow.submit_decision,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "edit",
            "principal": "finance-lead",
            "edited_args": {"month": "June"},
        },
    )
    status = await env.wait_status(handle, lambda s: [r.request_id for r in s.pending] == ["req-2"])
    assert status.pending[0].approvers == request.approvers
    [refused] = [e for e in status.last_events if e.type.value == "approval.ignored"]
    assert "month must look like" in refused.data["reason"] and "open again" in refused.data["reason"]
    assert env.business().count() == 0
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and len(result.evidence.writes) == 1
    first, second = result.evidence.approvals
    assert first.refused_reason and "month must look like" in first.refused_reason
    assert second.decision.value == "approve" and second.refused_reason is None
    await assert_replays(env.client, handle.id)


async def test_a_decision_no_worker_answers_times_out_and_is_not_applied_later(
    config_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agent-worker approve` with every worker stopped gives up after its timeout with a clear
    message; when a worker runs again, the task does not act on that decision, and the request waits
    for a new one."""
    env = config_env
    async with running_worker(env.client, env.config):
        handle = await env.start(example_spec())
        [request] = (await env.awaiting_approval(handle)).pending
    approve = [
        *("--address", env.address, "approve", handle.id, "--request", request.request_id),
        *("--version", request.version, "--as", "finance-lead", "--timeout", "3"),
    ]
    code = await asyncio.wait_for(asyncio.to_thread(cli_main, approve), 30)
    assert code == 1
    assert "no worker answered" in capsys.readouterr().err
    async with running_worker(env.client, env.config):
        # Long enough for the task's next workflow task (the stale update is delivered with it).
        await asyncio.sleep(8)
        status = await env.wait_status(handle, lambda s: True)
        assert [r.request_id for r in status.pending] == [request.request_id]
        assert not any(e.type.value == "approval.decided" for e in status.last_events)
        assert env.business().count() == 0
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    [approval] = result.evidence.approvals
    assert approval.via == "update"
    await assert_replays(env.client, handle.id)


async def test_a_signed_approve_with_no_worker_gives_up_with_a_clear_message(
    config_env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`approve --sign` first asks the task which run chain to sign for: with no worker running,
    that query gives up after the timeout too, with the same clear message, and nothing is sent."""
    env = config_env
    keys = tmp_path / "keys"
    async with running_worker(env.client, env.config):
        handle = await env.start(signed_spec(keys))
        [request] = (await env.awaiting_approval(handle)).pending
    approve = [
        *("--address", env.address, "approve", handle.id, "--request", request.request_id),
        *("--version", request.version, "--as", "finance-lead", "--timeout", "3"),
        *("--sign", "--keys-dir", str(keys)),
    ]
    started = time.monotonic()
    code = await asyncio.wait_for(asyncio.to_thread(cli_main, approve), 30)
    assert code == 1
    assert "no worker answered" in capsys.readouterr().err
    assert time.monotonic() - started < 20
    history = await handle.fetch_history()
    assert not any(e.HasField("workflow_execution_signaled_event_attributes") for e in history.events)
    async with running_worker(env.client, env.config):
        await env.cancel(handle)


async def test_a_signalled_decision_past_its_expiry_is_ignored_with_the_reason(env: TaskEnv) -> None:
    """A decision carrying ``expires_at`` that reaches the task too late changes nothing, and says so."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    await handle.signal(
        AgentTaskWorkflow.submit_decision,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "approve",
            "principal": "finance-lead",
            "expires_at": (datetime.now(UTC) - timedelta(minutes=1)).isoformat(),
        },
    )
    status = await env.wait_status(handle, lambda s: bool(s.ignored))
    assert "expired" in status.ignored[-1].reason
    assert [r.request_id for r in status.pending] == [request.request_id]
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    await assert_replays(env.client, handle.id)
