"""A team's own code sits on the import path beside the worker: its own ``worker.py`` (the name the
layout gives the worker's entry point) does not take the place of the worker that
``agent-worker worker`` runs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from agent_worker.schemas.tasks import TaskPhase

from tests.helpers.support import REPO, TaskEnv

USERS_WORKER = """raise SystemExit("the team's own worker.py was imported instead of the agent worker's")
"""


async def test_a_users_own_worker_module_on_the_path_does_not_break_agent_worker_worker(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """With a directory holding the team's own ``worker.py`` first on ``PYTHONPATH`` and as the current
    directory, the installed ``agent-worker worker`` still starts its own worker and runs a task."""
    env = config_env
    team = tmp_path / "team"
    team.mkdir()
    (team / "worker.py").write_text(USERS_WORKER)
    log = tmp_path / "worker.log"
    console_script = Path(sys.executable).parent / "agent-worker"
    with log.open("ab") as out:
        proc = subprocess.Popen(  # noqa: ASYNC220 (a worker to run beside the test)
            [str(console_script), "worker"],
            env={**env.worker_env(), "PYTHONPATH": f"{team}{os.pathsep}{REPO}"},
            cwd=team,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        handle = await env.start(
            {
                "agent": "recorder",
                "prompt": "record: beside",
                "policy": {"rules": [{"tool": "record_value", "decision": "allow"}]},
            }
        )
        result = await asyncio.wait_for(handle.result(), 90)
        assert result.phase is TaskPhase.COMPLETED, result.reason
        assert env.business().count() == 1
        assert proc.poll() is None, log.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    assert "team's own worker.py" not in log.read_text()


def test_a_worker_with_no_agents_named_refuses_to_start_saying_how_to_name_them(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """The default config registers no agent (the demo registers the example itself): a worker started
    with none exits at once, naming AGENT_WORKER_AGENTS."""
    env = config_env
    done = subprocess.run(
        [sys.executable, "-m", "agent_worker.cli.main", "worker"],
        env={**env.worker_env(), "AGENT_WORKER_AGENTS": ""},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "no agents to run" in done.stderr and "AGENT_WORKER_AGENTS" in done.stderr, done.stderr
