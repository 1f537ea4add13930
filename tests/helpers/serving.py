"""`agent-worker api` or `mcp-serve` in its own process against a test's task queue, as a user runs
it: a tokens file, a tenants file, a free loopback port, and the ``api_*`` settings as
``AGENT_WORKER_*`` variables."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
from agent_worker.cli.devserver import free_port, stop_process_group

from tests.helpers.support import REPO, TaskEnv, until


@contextlib.asynccontextmanager
async def serving_process(
    env: TaskEnv,
    tmp_path: Path,
    command: Sequence[str],
    *,
    tokens: dict[str, str],
    tenants: dict[str, list[str]],
    ready_path: str = "/healthz",
    **settings: str,
) -> AsyncIterator[tuple[str, int]]:
    """``agent-worker <command...>`` serving ``env``'s task queue until the block ends; its URL and
    pid once ``ready_path`` answers below 500 (without authentication)."""
    tokens_file, tenants_file = tmp_path / "tokens.json", tmp_path / "tenants.json"
    tokens_file.write_text(json.dumps(tokens))
    tenants_file.write_text(json.dumps(tenants))
    port = free_port()
    variables = {f"AGENT_WORKER_{k.upper()}": v for k, v in settings.items()}
    argv = [
        sys.executable, "-m", "agent_worker.cli.main", "--address", env.address, *command,
        "--bind", f"127.0.0.1:{port}", "--tokens", str(tokens_file), "--tenants", str(tenants_file),
        "--task-queue", env.task_queue,
    ]  # fmt: skip
    proc = await asyncio.to_thread(
        subprocess.Popen,
        argv,
        cwd=REPO,
        env={**env.worker_env(), **variables},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:

            async def ready() -> bool:
                assert proc.poll() is None, f"`agent-worker {command[0]}` exited"
                with contextlib.suppress(httpx.TransportError):
                    return (await http.get(ready_path)).status_code < 500
                return False

            await until(ready, 60, f"`agent-worker {command[0]}` to answer {ready_path}")
        yield url, proc.pid
    finally:
        await asyncio.to_thread(stop_process_group, proc)
