"""The PostgreSQL business writer against a real server: exactly-once writes, conflicts, outages, and
a lost connection or a lost commit answer reported as unknown and reconciled by lookup."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_worker.activities.business.base import load_writer
from agent_worker.activities.business.postgres import PostgresBusinessStore
from agent_worker.activities.business.sqlite import SqliteBusinessStore
from agent_worker.activities.errors import WriteConflict, WriteError, WriteUnavailable, WriteUnknown
from agent_worker.schemas.writes import WriteInput, WriteOutcome, operation_key

from tests.helpers.postgres_server import AnswerDroppingProxy, PostgresServer, start_postgres


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """One real server per module; a machine without PostgreSQL fails here rather than skipping."""
    server = start_postgres()
    yield server
    server.close()


@pytest.fixture(scope="module")
def store(server: PostgresServer) -> PostgresBusinessStore:
    return PostgresBusinessStore(server.dsn)


def make_input(payload: dict[str, Any] | None = None, *, key: str | None = None) -> WriteInput:
    return WriteInput(
        operation_key=key or operation_key("task-pg", uuid.uuid4().hex),
        task_id="task-pg",
        tenant="acme",
        record_type="invoice",
        payload={"amount": 120, "currency": "EUR"} if payload is None else payload,
    )


@pytest.fixture
def table_lock(server: PostgresServer) -> Iterator[psycopg.Connection]:
    """A second session holding a lock every INSERT into the table waits for, until the test ends."""
    conn = psycopg.connect(server.dsn)
    conn.execute("LOCK TABLE business_records IN EXCLUSIVE MODE")
    yield conn
    if not conn.closed:
        conn.rollback()
    conn.close()


def test_first_write_commits_and_lookup_finds_it(store: PostgresBusinessStore) -> None:
    """A first write commits one row, and lookup returns the same receipt."""
    input = make_input()
    receipt = store.write(input)
    assert receipt.outcome is WriteOutcome.COMMITTED and not receipt.replayed
    assert store.lookup(input.operation_key) == receipt
    assert store.count(input.operation_key) == 1
    assert store.payload(input.operation_key) == input.payload
    assert store.lookup(operation_key("task-pg", "never-written")) is None


def test_receipts_match_the_sqlite_adapter(store: PostgresBusinessStore, tmp_path: Path) -> None:
    """For the same input, the receipt equals the SQLite adapter's except for the commit time."""
    input = make_input({"lines": [{"sku": "A-1", "qty": 2}], "note": "é"})
    ours = store.write(input)
    theirs = SqliteBusinessStore(tmp_path / "business.db").write(input)
    assert ours.model_dump(exclude={"committed_at"}) == theirs.model_dump(exclude={"committed_at"})


def test_same_key_same_payload_replays(store: PostgresBusinessStore) -> None:
    """Writing the same key and payload again returns the first receipt, replayed, with one row."""
    input = make_input()
    first = store.write(input)
    again = store.write(input)
    assert again.replayed
    assert again.model_copy(update={"replayed": False}) == first
    assert store.count(input.operation_key) == 1


def test_same_key_different_payload_conflicts(store: PostgresBusinessStore) -> None:
    """A different payload under a committed key raises WriteConflict and leaves the original intact."""
    input = make_input({"amount": 120})
    first = store.write(input)
    other = input.model_copy(update={"payload": {"amount": 999}})
    with pytest.raises(WriteConflict) as raised:
        store.write(other)
    assert first.payload_digest in str(raised.value) and raised.value.retryable == "no"
    with pytest.raises(WriteConflict):
        store.write(input.model_copy(update={"record_type": "credit_note"}))
    assert store.payload(input.operation_key) == {"amount": 120}
    assert store.lookup(input.operation_key) == first


CONCURRENT_ROUNDS = 40


def test_concurrent_writes_of_one_key_make_one_row(store: PostgresBusinessStore) -> None:
    """Eight threads writing one key at once, over 40 keys: each key has one row, every thread gets
    its receipt (none fails on the record id two of them met first), and they agree on its id.
    Found by a full run: with a conflict target of ``operation_key`` alone, one write in such a race
    failed for good as a unique violation of the primary key."""
    barrier = threading.Barrier(8)

    def write(input: WriteInput) -> Any:
        barrier.wait()
        return store.write(input)

    with ThreadPoolExecutor(8) as pool:
        for _ in range(CONCURRENT_ROUNDS):
            input = make_input()
            receipts = list(pool.map(write, [input] * 8))
            assert store.count(input.operation_key) == 1
            assert len({r.record_id for r in receipts}) == 1
            assert sorted(r.replayed for r in receipts) == [False] + [True] * 7


def test_server_down_makes_write_and_lookup_unavailable(
    server: PostgresServer, store: PostgresBusinessStore
) -> None:
    """With the server stopped, write and lookup raise retryable WriteUnavailable."""
    input = make_input()
    server.stop()
    try:
        with pytest.raises(WriteUnavailable) as write_error:
            store.write(input)
        with pytest.raises(WriteUnavailable) as lookup_error:
            store.lookup(input.operation_key)
    finally:
        server.start()
    assert write_error.value.retryable == "yes" and write_error.value.operation == "business.write"
    assert lookup_error.value.operation == "business.lookup"
    assert store.lookup(input.operation_key) is None


def test_write_lands_once_after_recovery(server: PostgresServer, store: PostgresBusinessStore) -> None:
    """A write refused during an outage lands exactly once when retried after the server is back."""
    input = make_input()
    server.stop()
    try:
        with pytest.raises(WriteUnavailable):
            store.write(input)
    finally:
        server.start()
    assert not store.write(input).replayed
    assert store.write(input).replayed
    assert store.count(input.operation_key) == 1


def test_connection_killed_during_the_insert_is_unknown(
    server: PostgresServer, store: PostgresBusinessStore, table_lock: psycopg.Connection
) -> None:
    """A write whose backend is terminated after the INSERT was sent raises WriteUnknown, and lookup
    then shows it did not commit, so the retry commits it once."""
    input = make_input()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(store.write, input)
        pid = _backend_waiting_on_insert(server)
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        with pytest.raises(WriteUnknown) as raised:
            pending.result(timeout=10)
    assert raised.value.retryable == "no"
    table_lock.rollback()
    assert store.lookup(input.operation_key) is None
    assert not store.write(input).replayed
    assert store.count(input.operation_key) == 1


def test_lost_commit_answer_is_unknown_and_lookup_finds_the_commit(
    server: PostgresServer, store: PostgresBusinessStore
) -> None:
    """A write whose commit answer is lost on the wire raises WriteUnknown, and lookup then shows it
    committed, so a retry replays instead of writing twice."""
    proxy = AnswerDroppingProxy(server.port)
    try:
        through_proxy = PostgresBusinessStore(proxy.dsn(server))
        input = make_input()
        proxy.arm(b"INSERT INTO")
        with pytest.raises(WriteUnknown):
            through_proxy.write(input)
        assert proxy.cut.is_set()
        found = store.lookup(input.operation_key)
        assert found is not None and found.record_id is not None
        assert through_proxy.write(input).replayed
        assert store.count(input.operation_key) == 1
    finally:
        proxy.close()


def test_server_refusal_on_a_live_connection_is_unavailable(
    server: PostgresServer, table_lock: psycopg.Connection
) -> None:
    """An INSERT the server answers with an error (a lock timeout) raises WriteUnavailable and commits
    nothing, and the retry lands once the lock is gone."""
    impatient = PostgresBusinessStore(f"{server.dsn} options='-c lock_timeout=200'")
    input = make_input()
    with pytest.raises(WriteUnavailable) as raised:
        impatient.write(input)
    assert "lock timeout" in str(raised.value)
    table_lock.rollback()
    assert impatient.lookup(input.operation_key) is None
    assert not impatient.write(input).replayed


def test_record_id_taken_by_another_key_is_not_retryable(store: PostgresBusinessStore) -> None:
    """Two keys deriving the same record id: the second write fails for good and the first stays."""
    prefix = "op-" + uuid.uuid4().hex[:16]
    first = store.write(make_input({"n": 1}, key=prefix + "-a"))
    with pytest.raises(WriteError) as raised:
        store.write(make_input({"n": 2}, key=prefix + "-b"))
    assert (raised.value.code, raised.value.retryable) == ("write_invalid", "no")
    assert store.lookup(prefix + "-b") is None
    assert store.lookup(prefix + "-a") == first


def test_custom_table_keeps_its_own_records(server: PostgresServer, store: PostgresBusinessStore) -> None:
    """A store on another table (schema-qualified) creates it and writes only there."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS ledger")
    other = PostgresBusinessStore(server.dsn, table="ledger.records")
    input = make_input()
    other.write(input)
    assert other.count(input.operation_key) == 1
    assert store.lookup(input.operation_key) is None


def test_factory_loads_through_load_writer(server: PostgresServer) -> None:
    """``module:factory`` loading builds a working writer from a DSN."""
    writer = load_writer("agent_worker.activities.business.postgres:postgres_writer", dsn=server.dsn)
    assert isinstance(writer, PostgresBusinessStore)
    writer.close()


def test_missing_psycopg_is_a_non_retryable_error_with_an_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without psycopg the store raises backend_unavailable, not retried, naming the extra to install."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(WriteError) as raised:
        PostgresBusinessStore("host=127.0.0.1")
    assert (raised.value.code, raised.value.retryable) == ("backend_unavailable", "no")
    assert "agent-worker[postgres]" in str(raised.value)


def _backend_waiting_on_insert(server: PostgresServer, timeout: float = 10) -> int:
    """The pid of the backend whose INSERT into the table is waiting on a lock."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE 'INSERT INTO \"business_records\"%'"
            ).fetchone()
            if row is not None:
                return row[0]
            time.sleep(0.05)
    raise AssertionError("no INSERT is waiting on the table lock")
