"""Business writes happen exactly once, against SQLite, PostgreSQL and the HTTP business service:
a lost response is reconciled by lookup, a worker killed between commit and completion writes
nothing twice, a system that is down at write time gets the write once when it is back, and a key
taken by another payload is a conflict that hands the task off."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.schemas.writes import WriteInput, operation_key
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client

from tests.helpers.business_backends import BACKENDS, Backend, open_backend
from tests.helpers.matrix import Record, leftover_sandboxes, record
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.support import DevServer, TaskEnv, make_config, running_worker, spawn_worker

FAULTY = "tests.helpers.faults:faulty_writer"


def recorder(value: str) -> dict:
    """A task that records ``value`` with no approval needed."""
    return {
        "agent": "recorder",
        "prompt": f"record: {value}",
        "policy": {"rules": [{"tool": "record_value", "decision": "allow"}]},
    }


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    postgres: PostgresServer | None = (
        request.getfixturevalue("postgres") if request.param == "postgres" else None
    )
    with open_backend(request.param, tmp_path / "data", postgres) as opened:
        yield opened


def business_env(
    client: Client, dev_server: DevServer, tmp_path: Path, backend: Backend, faults: str
) -> TaskEnv:
    os.environ["AW_FAULTS"] = faults
    os.environ["AW_FAULT_DIR"] = str(tmp_path / "fault-marks")
    config = make_config(tmp_path / "data", business_writer=FAULTY, **backend.settings)
    return TaskEnv(client=client, config=config, address=dev_server.address)


@pytest.fixture(autouse=True)
def _clean_fault_env() -> Iterator[None]:
    yield
    os.environ.pop("AW_FAULTS", None)
    os.environ.pop("AW_FAULT_DIR", None)


async def test_lost_response_is_reconciled_by_lookup(
    client: Client, dev_server: DevServer, tmp_path: Path, backend: Backend, record_property: Record
) -> None:
    """The write commits and its response is lost: the workflow looks the key up, finds the row, and
    records it; exactly one row exists."""
    env = business_env(client, dev_server, tmp_path, backend, "lost")
    async with running_worker(client, env.config):
        handle = await env.start(recorder("lost-1"))
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        status = await handle.query(AgentTaskWorkflow.status)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [write] = result.evidence.writes
    assert write.confirmed is True and backend.store.count() == 1
    events = [
        (e.type.value, e.data.get("found")) for e in status.last_events if e.type.value.startswith("write.")
    ]
    assert ("write.unknown", None) in events and ("write.reconciled", True) in events
    assert result.final_output == f"recorded as {write.receipt.record_id}"
    record(
        record_property,
        observed=f"{backend.name}: write.unknown, then reconciled by lookup; {backend.store.count()} row",
        duplicates=backend.store.count() - 1,
        lost=0 if result.phase is TaskPhase.COMPLETED else 1,
        leftover=leftover_sandboxes(env.config, [handle.id]),
    )


async def test_sigkill_between_commit_and_completion_writes_once(
    client: Client, dev_server: DevServer, tmp_path: Path, backend: Backend
) -> None:
    """The worker dies right after the commit, before the activity completes: the next worker's retry
    looks the key up first, so there is exactly one row."""
    env = business_env(client, dev_server, tmp_path, backend, "crash")
    first = spawn_worker(env, tmp_path / "worker-1.log")
    handle = await env.start(recorder("crash-1"))
    assert await asyncio.to_thread(first.wait, 60) == -signal.SIGKILL  # the fault killed it after commit
    assert backend.store.count() == 1
    second = spawn_worker(env, tmp_path / "worker-2.log")
    try:
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [write] = result.evidence.writes
    assert write.receipt.replayed is True  # found by the retry's lookup, not written again
    assert backend.store.count() == 1 and backend.store.count(write.operation_key) == 1


async def test_system_down_at_write_time_then_back_writes_once(
    client: Client, dev_server: DevServer, tmp_path: Path, backend: Backend
) -> None:
    """The business system is down when the write is attempted and comes back: the write lands once.
    PostgreSQL and the HTTP service are really stopped and started; SQLite, a file, gets an injected
    outage."""
    env = business_env(client, dev_server, tmp_path, backend, "none" if backend.can_go_down else "down")
    async with running_worker(client, env.config):
        if backend.can_go_down:
            backend.down()
        handle = await env.start(recorder("down-1"))
        if backend.can_go_down:
            deadline = time.monotonic() + 30
            while not await _write_failed_once(handle):
                assert time.monotonic() < deadline, "the write was never attempted while down"
                await asyncio.sleep(0.2)
            assert backend.store is not None
            backend.up()
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert backend.store.count() == 1


async def _write_failed_once(handle) -> bool:  # type: ignore[no-untyped-def]
    description = await handle.describe()
    return any(
        a.activity_type.name == "business.write" and a.attempt >= 2
        for a in description.raw_description.pending_activities
    )


async def test_same_key_with_another_payload_conflicts_and_hands_off(
    client: Client, dev_server: DevServer, tmp_path: Path, backend: Backend
) -> None:
    """The operation key already holds a different payload: conflict, nothing overwritten, and the
    task hands off with the reason."""
    env = business_env(client, dev_server, tmp_path, backend, "none")
    task_id = f"conflict-{backend.name}-{tmp_path.name[-8:]}"
    handle = await env.start(recorder("ours"), task_id=task_id)  # no worker yet: nothing written
    key = operation_key(task_id, "call_record", handle.first_execution_run_id)
    backend.writer.write(
        WriteInput(
            operation_key=key,
            task_id="someone-else",
            tenant="default",
            record_type="value",
            payload={"value": "theirs"},
        )
    )
    async with running_worker(client, env.config):
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and "conflicts" in result.reason
    assert backend.store.count() == 1
    assert backend.store.payload(key) == {"value": "theirs"}
