"""The `agent-worker` commands a person uses while a task runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from cli.main import main as cli_main
from tests.support import TaskEnv, example_spec


async def test_start_wait_shows_progress_and_the_evidence(
    env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`start FILE --wait` follows the phases live and prints the outcome with the sandbox record;
    a task needing no approval completes on its own."""
    spec = tmp_path / "task.json"
    spec.write_text(
        json.dumps({"agent": "shell", "prompt": "run: echo hello-from-the-sandbox", "tenant": "t1"})
    )
    args = [
        "--address",
        env.address,
        "start",
        str(spec),
        "--id",
        "cli-wait",
        "--task-queue",
        env.task_queue,
        "--wait",
    ]
    assert await asyncio.to_thread(cli_main, args) == 0
    out = capsys.readouterr().out
    assert "started task cli-wait (agent shell, tenant t1)" in out
    assert "phase=running" in out and "sandbox.exec" in out and "task.finished" in out
    assert "ended completed" in out
    assert "hello-from-the-sandbox" in out  # the agent's answer quotes the command's output
    assert "call_shell: exit 0" in out


async def test_cancel_command_ends_a_waiting_task(env: TaskEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """`cancel ID` ends a task that waits for approval; `status` then says cancelled."""
    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    assert await asyncio.to_thread(cli_main, ["--address", env.address, "cancel", handle.id]) == 0
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 30)
    assert "cancellation requested" in capsys.readouterr().out
    assert await asyncio.to_thread(cli_main, ["--address", env.address, "status", handle.id, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["phase"] == "cancelled"
    assert status["pending"] == []
