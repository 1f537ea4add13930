"""The `agent-worker` commands a person uses while a task runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas import visibility
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import WorkflowFailureError

from tests.helpers.support import REPO, TaskEnv, connect, example_spec, free_port


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


async def test_dev_starts_the_embedded_server_with_wal_and_search_attributes(tmp_path: Path) -> None:
    """`agent-worker dev --port P --db-filename F` serves Temporal on P from F in WAL mode, with the
    task search attributes registered."""
    port = free_port()
    db = tmp_path / "dev" / "temporal.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_worker.cli.main", "dev", "--port", str(port),
        "--db-filename", str(db), "--headless",
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        client = await connect(f"127.0.0.1:{port}")
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
        assert set(visibility.CLI_TYPES) <= set(listed.custom_attributes)
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)


COMMANDS = [
    "dev", "worker", "migrate", "start", "status", "inbox", "approve", "edit", "reject", "respond",
    "answer", "say", "cancel", "schedule", "events", "fork", "steps", "evidence", "verify", "revoke", "grant",
    "grants", "keys", "sandbox-image", "reap", "replay", "policy", "shadow", "doctor", "report", "api",
    "mcp-serve", "demo",
]  # fmt: skip


def test_help_lists_every_command_and_each_command_has_its_own_help_and_handler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`agent-worker --help` (the console script's module, in a fresh process) names every command;
    each command's `--help` exits 0 showing its own usage, and each registered a handler."""
    import subprocess

    from agent_worker.cli.main import build_parser

    shown = subprocess.run(
        [sys.executable, "-m", "agent_worker.cli", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    listed = shown.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert listed == COMMANDS
    [commands] = [a for a in build_parser()._actions if a.dest == "command"]
    for name in COMMANDS:
        assert callable(commands.choices[name].get_default("handler")), f"{name} has no handler"
        with pytest.raises(SystemExit) as leaving:
            cli_main([name, "--help"])
        assert leaving.value.code == 0
        assert f"usage: agent-worker {name}" in capsys.readouterr().out


def test_a_bad_setting_stops_every_command_but_dev_naming_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configuration is read once, before any command runs: an invalid value is exit 2 naming
    the variable, and nothing else happens (here `keys new` writes no key)."""
    monkeypatch.setenv("AGENT_WORKER_MAX_CACHED_WORKFLOWS", "many")
    monkeypatch.setenv("HOME", "/nonexistent")
    assert cli_main(["keys", "new", "someone", "--keys-dir", "/nonexistent/keys"]) == 2
    assert "AGENT_WORKER_MAX_CACHED_WORKFLOWS" in capsys.readouterr().err
