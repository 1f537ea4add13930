"""A worker process killed (SIGKILL) while its task waits for approval loses nothing: a new worker
process takes over, the approval completes the task, and the write happens exactly once."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent_worker.cli.report import AgentReport, report
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from agent_worker.client import AgentWorkerClient
from tests.helpers.matrix import Record, leftover_sandboxes, record
from tests.helpers.support import TaskEnv, decision, example_spec, sigkill, worker_process


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


async def test_a_command_taken_over_after_a_sigkill_reports_its_takeover_time(
    config_env: TaskEnv, tmp_path: Path, record_property: Record
) -> None:
    """Kill -9 the worker while its command runs; another process's attempt of the command measures
    the time from the lost worker's last heartbeat to its own start: the command's evidence, the
    task's usage, its event and ``agent-worker report`` give it. It is bound by the heartbeat
    timeout (10 s): the server gives the attempt up that long after the last heartbeat."""
    env = config_env
    async with worker_process(env, tmp_path / "worker-1.log") as first:
        handle = await env.start({"agent": "shell", "prompt": "run: sleep 6; echo done"})
        await until_started(handle, "sandbox.exec")
        await asyncio.sleep(3)  # heartbeats of the running command reach the server
        await sigkill(first)
    killed = time.monotonic()
    async with worker_process(env, tmp_path / "worker-2.log"):
        result: TaskResult = await asyncio.wait_for(handle.result(), 120)
        status = await handle.query(AgentTaskWorkflow.status)
    since_kill = time.monotonic() - killed

    assert result.phase is TaskPhase.COMPLETED and "done" in (result.final_output or ""), result.reason
    [command] = result.evidence.commands
    assert command.takeover_seconds is not None
    assert result.usage.takeovers == 1 and result.usage.takeover_seconds == command.takeover_seconds
    # At least most of the heartbeat timeout, at most the time since the kill plus the heartbeats'
    # throttle (the last one the server kept may be that much older than the kill).
    assert 5.0 <= command.takeover_seconds <= since_kill + 10.0, command.takeover_seconds
    [event] = [e for e in status.last_events if e.type.value == "work.taken_over"]
    assert event.data["work"] == "command" and event.data["seconds"] == command.takeover_seconds
    entry = await reported(env, handle.id)
    assert entry.takeovers == 1 and entry.takeover_mean_seconds == command.takeover_seconds
    record(
        record_property,
        observed=f"command taken over {command.takeover_seconds:.1f} s after the last heartbeat",
        duplicates=0,
        lost=0,
        leftover=0,
    )


async def until_started(handle: Any, activity_type: str, within: float = 60) -> None:
    """Wait until an attempt of ``activity_type`` runs (the server lists it pending, started)."""
    deadline = time.monotonic() + within
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        if any(p.activity_type.name == activity_type and p.last_started_time.seconds for p in pending):
            return
        assert time.monotonic() < deadline, f"{activity_type} never started"
        await asyncio.sleep(0.2)


async def reported(env: TaskEnv, task_id: str, within: float = 30) -> AgentReport:
    """The task's agent's line of ``agent-worker report`` once visibility lists the task as closed."""
    tasks = AgentWorkerClient(env.client, env.task_queue)
    deadline = time.monotonic() + within
    while True:
        agents = await report(tasks, datetime.now(UTC) - timedelta(hours=1), task_queue=env.task_queue)
        if agents and agents[0].tasks >= 1:
            [entry] = agents
            return entry
        assert time.monotonic() < deadline, f"report never listed {task_id}"
        await asyncio.sleep(0.5)
