"""Agent memory across tasks (``remember`` / ``recall``), against SQLite and PostgreSQL: a later task
recalls what an earlier one remembered, a write repeated after a SIGKILL is stored once, another
tenant recalls nothing, and an oversize fact is refused with its reason."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_worker.activities.stores import postgres_db
from agent_worker.activities.stores.memory import MAX_FACT_CHARS, MEMORY_SYSTEM, build_memory_store
from agent_worker.activities.stores.state import migrate_state
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.client import Client

from tests.helpers.postgres_server import PostgresServer
from tests.helpers.support import (
    TEST_AGENTS,
    DevServer,
    TaskEnv,
    assert_replays,
    make_config,
    running_worker,
    spawn_worker,
)

REPO = Path(__file__).resolve().parent.parent
AGENTS = [*TEST_AGENTS, "tests.helpers.memory_agent:registrations"]
FACT = "the Lisbon office closes its books on the 3rd working day"
ALLOW = {"rules": [{"tool": "remember", "decision": "allow"}]}


def memo(prompt: str, day: str, tenant: str = "acme") -> dict[str, Any]:
    """A `memo` task of one day's spec (its own prompt and labels), remember allowed."""
    return {"agent": "memo", "prompt": prompt, "tenant": tenant, "labels": {"day": day}, "policy": ALLOW}


@pytest.fixture(params=["sqlite", "postgres"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkerConfig]:
    """A worker config whose state (and so memory) backend is the parameter's."""
    if request.param == "sqlite":
        yield make_config(tmp_path / "data", agents=AGENTS)
        return
    postgres: PostgresServer = request.getfixturevalue("postgres")
    database = f"mem_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    config = make_config(
        tmp_path / "data", agents=AGENTS, state_backend="postgres", state_dsn=postgres.dsn_for(database)
    )
    migrate_state(config)
    yield config
    postgres_db.close_pools()


async def run(env: TaskEnv, spec: dict[str, Any]) -> TaskResult:
    handle = await env.start(spec)
    return await asyncio.wait_for(handle.result(), 90)


async def run_and_replay(env: TaskEnv, spec: dict[str, Any]) -> TaskResult:
    """``run``, then the task's history replayed against the current code (and recorded by
    ``make histories``)."""
    handle = await env.start(spec)
    result = await asyncio.wait_for(handle.result(), 90)
    await assert_replays(env.client, handle.id)
    return result


async def test_second_task_recalls_what_the_first_remembered(
    client: Client, dev_server: DevServer, config: WorkerConfig
) -> None:
    """A fact remembered by Monday's task (a durable write, in its evidence) is what Tuesday's task,
    with another prompt and labels, is given by recall."""
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        first = await run_and_replay(env, memo(f"remember: {FACT}", "2026-12-07"))
        second = await run(env, memo("recall: when do Lisbon books close?", "2026-12-08"))
    assert first.phase is TaskPhase.COMPLETED, first.reason
    [write] = first.evidence.writes
    assert write.system == MEMORY_SYSTEM and write.confirmed is True
    assert second.phase is TaskPhase.COMPLETED, second.reason
    assert second.final_output == f"recalled: 1. {FACT}"


async def test_another_tenant_recalls_nothing(
    client: Client, dev_server: DevServer, config: WorkerConfig
) -> None:
    """The same agent in another tenant does not recall the first tenant's fact."""
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        await run(env, memo(f"remember: {FACT}", "2026-12-07"))
        other = await run(env, memo("recall: Lisbon books", "2026-12-08", tenant="globex"))
        same = await run(env, memo("recall: Lisbon books", "2026-12-08"))
    assert other.final_output == "recalled: no remembered facts match"
    assert same.final_output == f"recalled: 1. {FACT}"


async def test_oversize_fact_is_refused_with_the_reason(
    client: Client, dev_server: DevServer, config: WorkerConfig
) -> None:
    """A fact over the cap is not written; the model is told its size and the limit."""
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        result = await run(env, memo("remember: " + "x" * (MAX_FACT_CHARS + 1), "2026-12-07"))
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.evidence.writes == []
    assert f"is {MAX_FACT_CHARS + 1} characters; the limit is {MAX_FACT_CHARS}" in result.final_output
    assert build_memory_store(config).count() == 0


async def test_memory_write_repeated_after_sigkill_exists_once(
    client: Client, dev_server: DevServer, config: WorkerConfig, tmp_path: Path
) -> None:
    """The worker is SIGKILLed right after the fact commits; the next worker's retry finds the key
    and the fact is stored once."""
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    faults = {
        "AW_FAULTS": "crash",
        "AW_FAULT_DIR": str(tmp_path / "fault-marks"),
        "AGENT_WORKER_BUSINESS_SYSTEMS": f"{MEMORY_SYSTEM}=tests.helpers.memory_agent:faulty_memory",
    }
    first = spawn_worker(env, tmp_path / "worker-1.log", **faults)
    handle = await env.start(memo(f"remember: {FACT}", "2026-12-07"))
    assert await asyncio.to_thread(first.wait, 90) == -signal.SIGKILL  # killed right after the commit
    store = build_memory_store(config)
    assert store.count() == 1
    second = spawn_worker(env, tmp_path / "worker-2.log", **faults)
    try:
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [write] = result.evidence.writes
    assert write.receipt.replayed is True
    assert store.count() == 1 and store.count(write.operation_key) == 1
    assert os.environ.get("AW_FAULTS") is None  # the faults stayed in the worker processes


def test_the_docs_example_prints_what_the_docs_say(tmp_path: Path) -> None:
    """docs/memory.md's runnable block, run as written in its own process (embedded Temporal server,
    real worker), prints the output the page shows: Tuesday recalls Monday's fact, another tenant
    nothing."""
    page = (REPO / "docs" / "memory.md").read_text()
    [block] = re.findall(r"^```python runnable\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)
    [shown] = re.findall(r"^\$ python memory_example.py\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)
    script = tmp_path / "memory_example.py"
    script.write_text(block)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TEMPORAL_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout == shown
