"""Approval binds to a principal's permission at commit time: revoked between approval and commit,
the write does not happen; the task asks again (or hands off, per policy)."""

from __future__ import annotations

import asyncio

import pytest

from activities.authz import SqliteAuthorizer
from activities.sandbox import sandbox_id_for
from schemas.tasks import TaskPhase, TaskResult
from tests.helpers.matrix import Record, leftover_sandboxes, record
from tests.helpers.support import TaskEnv, assert_replays, decision
from workflows import AgentTaskWorkflow


def approved_write_after_slow_command(on_revoked: str) -> dict:
    """The agent proposes a 3-second command and, in the same turn, a write needing approval."""
    return {
        "agent": "recorder",
        "prompt": "first run: touch started && sleep 3; record: paid-invoice-17",
        "policy": {
            "rules": [
                {"tool": "record_value", "decision": "require_approval", "approvers": ["clerk", "supervisor"]}
            ],
            "on_revoked": on_revoked,
        },
    }


async def approve_then_revoke(env: TaskEnv, handle, principal: str) -> None:  # type: ignore[no-untyped-def]
    [request] = (await env.awaiting_approval(handle)).pending
    await handle.execute_update(AgentTaskWorkflow.decide, decision(request, "approve", principal))
    started = (
        env.config.sandbox_root
        / sandbox_id_for(handle.id, handle.first_execution_run_id)
        / "work"
        / "started"
    )
    for _ in range(200):
        if started.exists():
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the command before the write never started")
    # Approved, not yet committed (the command runs first): revoke now.
    SqliteAuthorizer(env.config.authz_db).revoke(principal, "record_value", reason="left the finance team")


async def test_revoked_after_approval_blocks_the_write_and_asks_again(
    env: TaskEnv, record_property: Record
) -> None:
    """No write after the revocation; the request is open again; another approver's approval then
    writes exactly once."""
    handle = await env.start(approved_write_after_slow_command("reapprove"))
    await approve_then_revoke(env, handle, "clerk")
    status = await env.wait_status(handle, lambda s: [r.request_id for r in s.pending] == ["req-2"])
    assert status.phase is TaskPhase.AWAITING_APPROVAL
    assert env.business().count() == 0
    [revoked] = [e for e in status.last_events if e.type.value == "authz.revoked"]
    assert revoked.data["principal"] == "clerk" and "left the finance team" in revoked.data["reason"]
    [request] = status.pending
    await handle.signal(AgentTaskWorkflow.submit_decision, decision(request, "approve", "supervisor"))
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    assert env.business().count() == 1
    first, second = result.evidence.approvals
    assert (first.principal, first.revoked_reason is not None) == ("clerk", True)
    assert (second.principal, second.revoked_at) == ("supervisor", None)
    await assert_replays(env.client, handle.id)
    record(
        record_property,
        observed="write blocked after revocation (0 rows); re-approved by another principal; 1 row",
        duplicates=env.business().count() - 1,
        lost=0 if result.phase is TaskPhase.COMPLETED else 1,
        leftover=leftover_sandboxes(env.config, [handle.id]),
    )


async def test_revoked_after_approval_hands_off_when_the_policy_says_so(env: TaskEnv) -> None:
    """With on_revoked=hand_off the task ends handed_off, explained, and nothing is written."""
    handle = await env.start(approved_write_after_slow_command("hand_off"))
    await approve_then_revoke(env, handle, "clerk")
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and "no longer holds" in result.reason and "left the finance team" in result.reason
    assert env.business().count() == 0
    status = await handle.query(AgentTaskWorkflow.status)
    assert any(e.type.value == "authz.revoked" for e in status.last_events)
