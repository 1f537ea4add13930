"""Cancelling a task with a live sandbox command stops the command, destroys the sandbox, and
records the cancellation: nothing is left running or on disk."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from agent_worker.activities.sandbox import sandbox_id_for
from agent_worker.schemas.tasks import TaskPhase
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from tests.helpers.support import TaskEnv


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


async def test_cancel_kills_the_running_command_and_destroys_the_sandbox(env: TaskEnv) -> None:
    """The command (sleep 300) is killed, the sandbox dir is gone, the task ends cancelled."""
    marker = f"aw-cancel-{uuid.uuid4().hex[:8]}"
    spec = {"agent": "shell", "prompt": f"run: touch started && sleep 300 # {marker}"}
    handle = await env.start(spec)
    work = env.config.sandbox_root / sandbox_id_for(handle.id, handle.first_execution_run_id) / "work"
    deadline = time.monotonic() + 30
    while not (work / "started").exists():
        assert time.monotonic() < deadline, "the sandbox command never started"
        await asyncio.sleep(0.1)
    assert processes_with(marker), "the command should be running"

    cancelled_at = time.monotonic()
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 60)
    took = time.monotonic() - cancelled_at

    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert not work.parent.exists(), "the sandbox must be destroyed"
    assert processes_with(marker) == [], "the command must be killed"
    status = await handle.query(AgentTaskWorkflow.status)
    assert status.phase is TaskPhase.CANCELLED
    # The command was the task's first: it made the sandbox and removed it as it stopped (the
    # directory is gone, above); the task never had it, so it records no create or destroy of its own.
    types = [e.type.value for e in status.last_events]
    assert "sandbox.created" not in types and types[-1] == "task.finished"
    finished = status.last_events[-1]
    assert (finished.at - status.last_events[0].at).total_seconds() >= 0
    assert took < 30, f"cancellation took {took:.1f} s"
