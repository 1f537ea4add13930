"""`agent-worker demo --approve` (what `make demo` runs) works from nothing: it starts its own dev
server and worker, runs the example to completion with no API key, prints the evidence, and stops
what it started."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from agent_worker.cli.devserver import port_open

from tests.helpers.support import REPO, free_port


async def test_demo_runs_end_to_end_from_nothing(tmp_path: Path) -> None:
    """Exit 0, the pending approval and the command a human would type are shown, the task
    completes with a write confirmed by lookup, and no server is left listening."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AGENT_WORKER_", "OPENAI_"))}
    env["PYTHONPATH"] = str(REPO)
    proc = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "agent_worker.cli.main",
            "demo",
            "--approve",
            "--address",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(tmp_path / "data"),
            "--headless",
        ],  # fmt: skip
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "starting the embedded Temporal dev server" in out
    assert "starting a worker" in out
    assert "temporal workflow signal --workflow-id" in out and "--name submit_decision" in out
    assert "Total: 9633.99" in out  # the report preview
    assert "ended completed" in out
    assert "confirmed by lookup: yes" in out
    assert not port_open("127.0.0.1", port), "the demo must stop the dev server it started"
