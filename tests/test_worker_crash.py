"""A worker process killed (SIGKILL) while its task waits for approval loses nothing: a new worker
process takes over, the approval completes the task, and the write happens exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from schemas.tasks import TaskPhase, TaskResult
from tests.helpers.matrix import Record, leftover_sandboxes, record
from tests.helpers.support import TaskEnv, decision, example_spec, sigkill, worker_process
from workflows import AgentTaskWorkflow


async def test_sigkill_while_awaiting_approval_then_new_worker_completes_once(
    config_env: TaskEnv, tmp_path: Path, record_property: Record
) -> None:
    """Kill -9 the worker mid-wait; start another process; approve; exactly one business row."""
    env = config_env
    async with worker_process(env, tmp_path / "worker-1.log") as first:
        handle = await env.start(example_spec())
        [request] = (await env.awaiting_approval(handle)).pending
        await sigkill(first)

    # The approval arrives while no worker runs at all; it waits in history.
    await handle.signal(AgentTaskWorkflow.submit_decision, decision(request, "approve", "finance-lead"))
    async with worker_process(env, tmp_path / "worker-2.log") as second:
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    assert second.returncode == 0, (tmp_path / "worker-2.log").read_text()[-2000:]
    assert result.phase is TaskPhase.COMPLETED
    assert [a.version for a in result.evidence.approvals] == [request.version]
    [write] = result.evidence.writes
    assert write.confirmed is True
    assert env.business().count() == 1
    assert env.business().count(write.operation_key) == 1
    record(
        record_property,
        observed=f"new worker completed; approval {request.version[:15]}... bound; 1 row",
        duplicates=env.business().count() - 1,
        lost=0 if result.phase is TaskPhase.COMPLETED else 1,
        leftover=leftover_sandboxes(env.config, [handle.id]),
    )
