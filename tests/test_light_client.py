"""The light client (issue 43, item 2): a process that only starts, reads and decides tasks (an app
using ``agent_worker.client``, the ``agent-worker start/status/approve`` commands) imports no agent,
model, sandbox, store or workflow code. Each check imports in a fresh interpreter and reads
``sys.modules``; nothing is timed (``bench/import_time.py`` measures the cost)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# What only the worker needs: the Agents SDK and the model clients, the sandboxes, the stores and
# their drivers, the HTTP API, and the project's own agent, sandbox, store, tool and workflow code.
HEAVY = (
    "agents",
    "openai",
    "litellm",
    "docker",
    "e2b",
    "e2b_code_interpreter",
    "boto3",
    "botocore",
    "psycopg",
    "redis",
    "fastapi",
    "starlette",
    "uvicorn",
    "mcp",
    "httpx",
    "aiohttp",
    "opentelemetry",
    "agent_worker.activities.agent",
    "agent_worker.activities.sandbox",
    "agent_worker.activities.stores",
    "agent_worker.activities.business",
    "agent_worker.activities.tools",
    "agent_worker.activities.artifacts",
    "agent_worker.activities.notify",
    "agent_worker.workflows",
    "agent_worker.worker",
)

# Each light entry: what a client-only process runs. ``cli.main``'s parser is the whole command
# line (every command registers its arguments); the task commands then load ``cli.tasks`` and the
# client, and connect through ``agent_worker.connection``.
LIGHT = {
    "the client": "import agent_worker.client",
    "the public face's client names": textwrap.dedent(
        """
        import agent_worker
        from agent_worker import AgentWorkerClient, DecisionKind, TaskSpec, TaskStatus, WorkerUnreachable
        """
    ),
    "the CLI's task commands": textwrap.dedent(
        """
        import agent_worker.client, agent_worker.connection, agent_worker.cli.tasks
        from agent_worker.cli.main import build_parser
        parser = build_parser()
        parser.parse_args(["status", "t-1"])
        parser.parse_args(["start", "task.json"])
        parser.parse_args(["approve", "t-1", "--request", "req-1", "--version", "v", "--as", "lead"])
        """
    ),
    # Run to their end: they read the configuration, set up logging, and connect (nothing listens on
    # port 1, so each stops there, as a command against a cluster that is down does).
    "`status` and `approve` run against an unreachable cluster": textwrap.dedent(
        """
        from agent_worker.cli.main import main
        approve = ["approve", "t-1", "--request", "r", "--version", "sha256:" + "0" * 64, "--as", "lead"]
        for argv in (["status", "t-1"], approve):
            assert main(["--address", "127.0.0.1:1", *argv]) == 1
        """
    ),
}


def loaded_after(code: str, names: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules of ``names`` (or their submodules) that ``code``, run in a fresh interpreter with
    this checkout first on the path, leaves in ``sys.modules``."""
    probe = code + textwrap.dedent(
        f"""
        import json, sys
        names = {list(names)!r}
        left = [n for n in names if any(m == n or m.startswith(n + ".") for m in sys.modules)]
        print(json.dumps(sorted(left)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("entry", sorted(LIGHT))
def test_a_client_only_process_loads_none_of_the_worker(entry: str) -> None:
    """Importing the client, the public face's client names, or the CLI with its task commands'
    parsing leaves none of the agent, model, sandbox, store or workflow modules loaded."""
    assert loaded_after(LIGHT[entry]) == []


def test_the_check_sees_the_worker_s_heavy_modules() -> None:
    """The same check on the worker finds the Agents SDK, the sandboxes and the workflows, so an
    empty answer above means they were not loaded (not that the check is blind); and the author
    API, reached through ``agent_worker``, still loads what it needs on first use."""
    assert {"agents", "agent_worker.activities.sandbox", "agent_worker.workflows", "openai"} <= set(
        loaded_after("import agent_worker.worker")
    )
    assert {"agents", "agent_worker.activities.agent"} <= set(
        loaded_after("from agent_worker import write_tool, Agent")
    )
