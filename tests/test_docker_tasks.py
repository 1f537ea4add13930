"""Tasks on the docker tier, end to end on a real dev server and a real Docker daemon: the example
picks docker by default, cancellation and worker crashes leave no stray containers, and the reaper
removes orphans while live tasks keep theirs."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import docker
import pytest
from agent_worker.activities.sandbox.base import LABEL_TASK
from agent_worker.activities.sandbox.docker import DockerSandbox
from agent_worker.cli.main import main as cli_main
from agent_worker.cli.sandboxes import REAPER_SCHEDULE_ID, schedule_reaper
from agent_worker.schemas.sandbox import CreateSandboxInput, ReapInput, SandboxBackend, SandboxSpec
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client, WorkflowFailureError

from tests.helpers.containers import containers_of, the_container
from tests.helpers.matrix import Record, leftover_sandboxes, record
from tests.helpers.support import (
    DevServer,
    TaskEnv,
    example_spec,
    make_config,
    running_worker,
    spawn_worker,
    until,
)


@pytest.fixture
def docker_config_env(client: Client, dev_server: DevServer, tmp_path: Path, docker_image: str) -> TaskEnv:
    config = make_config(tmp_path / "data", sandbox_backend="auto", docker_image=docker_image)
    return TaskEnv(client=client, config=config, address=dev_server.address)


@pytest.fixture
async def docker_env(docker_config_env: TaskEnv) -> AsyncIterator[TaskEnv]:
    async with running_worker(docker_config_env.client, docker_config_env.config):
        yield docker_config_env


async def test_example_runs_on_docker_by_default_when_available(docker_env: TaskEnv) -> None:
    """With backend `auto` and a reachable daemon, the monthly report's code runs in a container, and
    the container is gone when the task completes."""
    handle = await docker_env.start(example_spec())
    [request] = (await docker_env.awaiting_approval(handle)).pending
    status = await handle.query(AgentTaskWorkflow.status)
    [created] = [e for e in status.last_events if e.type.value == "sandbox.created"]
    assert created.data["backend"] == "docker" and created.data["trusted_only"] is False
    [container_id] = containers_of(handle.id)  # alive while the task waits
    labels = docker.from_env().containers.get(container_id).labels
    assert labels["agent-worker.tenant"] == "acme" and labels["agent-worker.run_id"] == handle.result_run_id
    await handle.execute_update(
        AgentTaskWorkflow.decide,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "approve",
            "principal": "finance-lead",
        },
    )
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and result.evidence.missing == []
    assert result.final_output and "9633.99" in result.final_output
    assert containers_of(handle.id) == []


async def test_cancel_during_a_long_command_stops_it_and_removes_the_container(
    docker_env: TaskEnv, record_property: Record
) -> None:
    """Cancel while `sleep 300` runs: the command stops, the container and its volume are removed, and
    the time from cancel to clean is recorded."""
    handle = await docker_env.start({"agent": "shell", "prompt": "run: touch started && sleep 300"})
    container = await until(lambda: the_container(handle.id), within=30, what="the container")
    await until(
        lambda: container.exec_run(["test", "-e", "/sandbox/work/started"]).exit_code == 0,
        within=30,
        what="the command",
    )
    cancelled_at = time.monotonic()
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 60)
    clean_seconds = time.monotonic() - cancelled_at
    assert containers_of(handle.id) == []  # `docker ps -a` with the task's labels is empty
    assert docker.from_env().volumes.list(filters={"label": f"{LABEL_TASK}={handle.id}"}) == []
    status = await handle.query(AgentTaskWorkflow.status)
    assert status.phase is TaskPhase.CANCELLED
    # The command was the task's first: it made the sandbox, and removed it as it stopped (checked
    # above); the task never had it, so it records no create or destroy of its own, only its end.
    types = [e.type.value for e in status.last_events]
    assert "sandbox.created" not in types and types[-1] == "task.finished"
    print(f"\ncancel to clean (container removed, task closed): {clean_seconds:.2f} s")
    record(
        record_property,
        observed=f"cancelled; command stopped, container and volume removed in {clean_seconds:.1f} s",
        duplicates=0,
        lost=0 if status.phase.terminal else 1,
        leftover=leftover_sandboxes(docker_env.config, [handle.id]),
        clean_seconds=round(clean_seconds, 2),
    )


async def test_sigkill_during_a_command_reuses_the_same_container(
    docker_config_env: TaskEnv, tmp_path: Path
) -> None:
    """The worker dies mid-command; the next worker retries the command in the same container, and no
    second container is ever made."""
    env = docker_config_env
    first = spawn_worker(env, tmp_path / "worker-1.log")
    try:
        handle = await env.start(
            {"agent": "shell", "prompt": "run: echo attempt >> attempts && sleep 4 && cat attempts"}
        )
        container = await until(lambda: the_container(handle.id), within=60, what="the container")
        container_id = container.id
        await until(
            lambda: container.exec_run(["test", "-e", "/sandbox/work/attempts"]).exit_code == 0,
            within=30,
            what="the command",
        )
        os.kill(first.pid, signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
    finally:
        if first.poll() is None:
            first.kill()
    second = spawn_worker(env, tmp_path / "worker-2.log")
    try:
        await until(
            lambda: (
                container.exec_run(["sh", "-c", "test $(wc -l < /sandbox/work/attempts) -ge 2"]).exit_code
                == 0
            ),
            within=60,
            what="the retried command",
        )
        assert containers_of(handle.id) == [container_id]  # the retry ran in the same container
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
    assert result.phase is TaskPhase.COMPLETED
    [command] = result.evidence.commands
    assert command.sandbox_id and command.stdout.count("attempt") >= 2
    assert containers_of(handle.id) == []


async def test_reaper_removes_orphans_and_leaves_live_tasks_alone(
    docker_env: TaskEnv, docker_image: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A container whose task does not exist is removed by `agent-worker reap`; a task waiting for
    approval keeps its container; the scheduled reaper workflow does the same."""
    live = await docker_env.start(example_spec())
    await docker_env.awaiting_approval(live)
    [live_container] = containers_of(live.id)
    # Orphans of this worker's namespace and deployment: the only ones its reaper may judge.
    owner = {"namespace": docker_env.client.namespace, "deployment": docker_env.config.sandbox_deployment}
    backend = DockerSandbox(docker_image, **owner)
    spec = SandboxSpec(backend=SandboxBackend.DOCKER)
    ghosts = [f"ghost-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for ghost in ghosts:
        await backend.create(CreateSandboxInput(task_id=ghost, tenant="t", spec=spec), {})
    assert all(containers_of(g) for g in ghosts)

    env_vars = {
        "AGENT_WORKER_SANDBOX_BACKEND": "docker",
        "AGENT_WORKER_DOCKER_IMAGE": docker_image,
        "AGENT_WORKER_TASK_QUEUE": docker_env.task_queue,
    }
    os.environ.update(env_vars)
    try:
        code = await asyncio.to_thread(cli_main, ["--address", docker_env.address, "reap", "--min-age", "0s"])
    finally:
        for key in env_vars:
            os.environ.pop(key)
    assert code == 0
    out = capsys.readouterr().out
    assert f"task {ghosts[0]} is unknown" in out
    assert containers_of(ghosts[0]) == []
    assert containers_of(live.id) == [live_container]

    # The same through the Temporal Schedule the CLI sets up, run once on demand.
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    await backend.create(CreateSandboxInput(task_id=ghost, tenant="t", spec=spec), {})
    await schedule_reaper(
        docker_env.client, docker_env.task_queue, timedelta(hours=1), ReapInput(min_age_seconds=0)
    )
    schedule = docker_env.client.get_schedule_handle(REAPER_SCHEDULE_ID)
    try:
        await schedule.trigger()
        await until(lambda: containers_of(ghost) == [], within=60, what="the scheduled reaper")
    finally:
        await schedule.delete()
    assert containers_of(live.id) == [live_container]
    await docker_env.cancel(live)
    assert containers_of(live.id) == []
