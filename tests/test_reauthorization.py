"""Approval binds to a principal's permission at commit time: revoked between approval and commit,
the write does not happen; the task asks again (or hands off, per policy). The revocation lands
between the approval and the write's own check on cue (``tests.helpers.revocation``)."""

from __future__ import annotations

import asyncio

from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from tests.helpers.matrix import Record, leftover_sandboxes, record
from tests.helpers.revocation import approve_then_revoke, approved_write
from tests.helpers.support import TaskEnv, assert_replays, decision


async def test_revoked_after_approval_blocks_the_write_and_asks_again(
    revocable_env: TaskEnv, record_property: Record
) -> None:
    """No write after the revocation; the request is open again; another approver's approval then
    writes exactly once."""
    env = revocable_env
    handle = await env.start(approved_write("reapprove"))
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


async def test_revoked_after_approval_hands_off_when_the_policy_says_so(revocable_env: TaskEnv) -> None:
    """With on_revoked=hand_off the task ends handed_off, explained, and nothing is written."""
    env = revocable_env
    handle = await env.start(approved_write("hand_off"))
    await approve_then_revoke(env, handle, "clerk")
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and "no longer holds" in result.reason and "left the finance team" in result.reason
    assert env.business().count() == 0
    status = await handle.query(AgentTaskWorkflow.status)
    assert any(e.type.value == "authz.revoked" for e in status.last_events)
