"""A safe upgrade with Worker Deployment versioning, as the README's procedure says: a task waits for
approval on build v1; build v2 starts, is made current, v1 drains on SIGTERM; the approval then
completes the task on v2 (the workflows auto-upgrade), writing once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

from agent_worker.cli.devserver import temporal_binary
from agent_worker.schemas.tasks import TaskPhase, TaskResult

from tests.helpers.support import TaskEnv, example_spec, spawn_worker


def set_current_version(env: TaskEnv, deployment: str, build_id: str) -> None:
    """`temporal worker deployment set-current-version`, retried until the new version's workers
    have polled every task queue (the server refuses before that)."""
    deadline = time.monotonic() + 60
    while True:
        done = subprocess.run(
            [temporal_binary(), "worker", "deployment", "set-current-version", "--address", env.address,
             "--deployment-name", deployment, "--build-id", build_id, "--yes"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        if done.returncode == 0:
            return
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.5)


def history_build_ids(events: list) -> list[str]:
    """The deployment build id of each completed workflow task, in order."""
    return [
        e.workflow_task_completed_event_attributes.deployment_version.build_id
        for e in events
        if e.HasField("workflow_task_completed_event_attributes")
    ]


async def test_a_waiting_task_moves_to_the_new_build_and_completes(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    env = config_env
    deployment = f"aw-{env.task_queue}"
    versioned = {"AGENT_WORKER_DEPLOYMENT_NAME": deployment}
    old = spawn_worker(env, tmp_path / "v1.log", AGENT_WORKER_BUILD_ID="v1", **versioned)
    new = None
    try:
        await asyncio.to_thread(set_current_version, env, deployment, "v1")
        handle = await env.start(example_spec())
        await env.awaiting_approval(handle)  # parked on v1

        new = spawn_worker(env, tmp_path / "v2.log", AGENT_WORKER_BUILD_ID="v2", **versioned)
        await asyncio.to_thread(set_current_version, env, deployment, "v2")
        old.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(old.wait, 40) == 0

        await env.approve(handle)  # answered by v2
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.to_thread(proc.wait, 40)
    assert result.phase is TaskPhase.COMPLETED
    assert env.business().count() == 1
    builds = history_build_ids((await handle.fetch_history()).events)
    assert builds[0] == "v1" and builds[-1] == "v2", builds
