"""Sub-agents: an agent delegates a sub-task to a child task; the parent waits for it, a failed child
is reported to the parent's agent (the parent carries on), and cancelling the parent cancels the
child and cleans up its sandbox."""

from __future__ import annotations

import asyncio
import time

import pytest
from agent_worker.activities.sandbox import sandbox_id_for
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from tests.helpers.support import TaskEnv, assert_replays, run_ids


async def test_delegated_sub_task_runs_as_a_child_and_its_answer_returns(env: TaskEnv) -> None:
    """The child runs the shell agent in its own sandbox; the parent's agent quotes its answer; the
    parent's evidence names the child."""
    handle = await env.start({"agent": "manager", "prompt": "delegate to shell: run: echo from-the-child"})
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    [delegation] = result.evidence.delegations
    assert delegation.task_id == f"{handle.id}/sub/call_sub"
    assert delegation.phase is TaskPhase.COMPLETED and delegation.agent == "shell"
    assert result.final_output and result.final_output.startswith("sub-task said: shell said:")
    assert "from-the-child" in result.final_output
    child: TaskResult = await env.client.get_workflow_handle(
        delegation.task_id, result_type=TaskResult
    ).result()
    assert len(child.evidence.commands) == 1 and child.evidence.commands[0].exit_code == 0
    assert result.evidence.commands == []  # the parent ran no command itself
    await assert_replays(env.client, handle.id)


async def test_failed_child_is_reported_to_the_parent_agent(env: TaskEnv) -> None:
    """A child that fails (its agent has no model here) does not fail the parent: the parent's agent
    is told, and the parent completes."""
    handle = await env.start({"agent": "manager", "prompt": "delegate to plain: say hi"})
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    [delegation] = result.evidence.delegations
    assert delegation.phase is TaskPhase.FAILED
    assert result.final_output and result.final_output.startswith("sub-task failed:")
    assert "no scripted model" in result.final_output
    await assert_replays(env.client, handle.id)


async def test_cancelling_the_parent_cancels_the_child(env: TaskEnv) -> None:
    """The child's long command is killed, its sandbox destroyed, and both tasks end cancelled."""
    handle = await env.start(
        {"agent": "manager", "prompt": "delegate to shell: run: touch started && sleep 300"}
    )
    child_id = f"{handle.id}/sub/call_sub"
    deadline = time.monotonic() + 30
    while not (child_runs := await run_ids(env.client, child_id)):  # its sandbox id needs its run chain
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    work = env.config.sandbox_root / sandbox_id_for(child_id, child_runs[0]) / "work"
    while not (work / "started").exists():
        assert time.monotonic() < deadline, "the child's command never started"
        await asyncio.sleep(0.1)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 60)
    child = env.client.get_workflow_handle(child_id)
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert (await child.describe()).status is WorkflowExecutionStatus.CANCELED
    assert not work.parent.exists(), "the child's sandbox must be destroyed"
