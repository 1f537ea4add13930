"""A task carries its whole state across continue-as-new: on a server that suggests it every few
events, the example still waits for approval, binds the approval, writes once and completes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from schemas.tasks import TaskPhase, TaskResult
from tests.support import (
    DevServer,
    TaskEnv,
    assert_replays,
    connect,
    example_spec,
    launch_dev_server,
    make_config,
    running_worker,
)


@pytest.fixture(scope="module")
def eager_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = launch_dev_server(
        tmp_path_factory.mktemp("temporal-can"), {"limit.historyCount.suggestContinueAsNew": "12"}
    )
    yield server
    server.stop()


@pytest.fixture
async def can_env(eager_server: DevServer, tmp_path: Path) -> AsyncIterator[TaskEnv]:
    client: Client = await connect(eager_server.address)
    env = TaskEnv(client=client, config=make_config(tmp_path / "data"), address=eager_server.address)
    async with running_worker(client, env.config):
        yield env


async def test_task_completes_across_continue_as_new(can_env: TaskEnv) -> None:
    """Several runs, one task: approval requested in one run is decided in a later one, the write
    happens once, and the evidence spans all runs."""
    env = can_env
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    await handle.signal(
        "submit_decision",
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "approve",
            "principal": "finance-lead",
        },
    )
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    runs = [e async for e in env.client.list_workflows(f"WorkflowId = '{handle.id}'")]
    assert len(runs) > 2, "the server should have made the task continue as new several times"
    assert len(result.evidence.inputs) == 3 and len(result.evidence.commands) == 1
    assert [a.request_id for a in result.evidence.approvals] == [request.request_id]
    assert env.business().count() == 1
    assert result.evidence.missing == []
    await assert_replays(env.client, handle.id)  # the last run: it starts from a carried-over state
