"""The local stores on disk: the artifact store serves only verified content, and the SQLite
business store commits each operation key once (replays, conflicts, concurrent writers)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.business import SqliteBusinessStore
from agent_worker.activities.errors import ArtifactCorrupt, ArtifactNotFound, WriteConflict
from agent_worker.schemas.digests import digest_bytes, digest_json
from agent_worker.schemas.writes import WriteInput, WriteOutcome, operation_key

DIGEST = "sha256:" + "ab" * 32
KEY = operation_key("task-1", "call-1")


def test_artifact_put_is_idempotent(tmp_path: Path) -> None:
    """Storing the same bytes twice gives the same digest and one stored file."""
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"report")
    assert store.put(b"report") == digest == digest_bytes(b"report")
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 1
    assert store.get(digest) == b"report"


def test_artifact_get_serves_only_verified_content(tmp_path: Path) -> None:
    """Bytes altered on disk raise ``ArtifactCorrupt``; a digest never stored, ``ArtifactNotFound``."""
    store = LocalArtifactStore(tmp_path)
    digest = store.put(b"total: 100")
    [stored] = [p for p in tmp_path.rglob("*") if p.is_file()]
    stored.write_bytes(b"total: 999")
    with pytest.raises(ArtifactCorrupt, match=digest):
        store.get(digest)
    with pytest.raises(ArtifactNotFound):
        store.get(DIGEST)


def _write(payload: dict[str, Any]) -> WriteInput:
    return WriteInput(operation_key=KEY, task_id="t-1", tenant="acme", record_type="report", payload=payload)


def test_business_first_write_commits(tmp_path: Path) -> None:
    """A key unknown to lookup (None) commits one record, and lookup then returns its receipt."""
    store = SqliteBusinessStore(tmp_path / "business.db")
    assert store.lookup(KEY) is None
    receipt = store.write(_write({"month": "2026-10", "total": "10"}))
    assert (receipt.outcome, receipt.replayed) == (WriteOutcome.COMMITTED, False)
    assert receipt.payload_digest == digest_json({"month": "2026-10", "total": "10"})
    assert store.count() == 1
    assert store.lookup(receipt.operation_key) == receipt


def test_business_repeated_write_replays_the_first_receipt(tmp_path: Path) -> None:
    """The same key with the same payload commits nothing new and returns the first receipt."""
    store = SqliteBusinessStore(tmp_path / "business.db")
    first = store.write(_write({"month": "2026-10", "total": "10"}))
    again = store.write(_write({"total": "10", "month": "2026-10"}))
    assert again.replayed is True
    assert again.model_copy(update={"replayed": False}) == first
    assert store.count() == 1


def test_business_same_key_different_payload_conflicts(tmp_path: Path) -> None:
    """The same key with another payload is a conflict; the first record is kept unchanged."""
    store = SqliteBusinessStore(tmp_path / "business.db")
    first = store.write(_write({"total": "10"}))
    with pytest.raises(WriteConflict, match=first.operation_key):
        store.write(_write({"total": "11"}))
    assert store.count() == 1
    assert store.lookup(first.operation_key) == first


def test_business_concurrent_writes_of_one_key_commit_once(tmp_path: Path) -> None:
    """Several threads writing one key at once yield exactly one row and one non-replayed receipt."""
    store = SqliteBusinessStore(tmp_path / "business.db")
    threads = 8
    barrier = threading.Barrier(threads)

    def write(_: int) -> Any:
        barrier.wait()
        return store.write(_write({"total": "10"}))

    with ThreadPoolExecutor(threads) as pool:
        receipts = list(pool.map(write, range(threads)))
    assert store.count() == 1
    assert sorted(r.replayed for r in receipts) == [False] + [True] * (threads - 1)
    assert len({r.record_id for r in receipts}) == 1


def test_same_key_with_another_record_type_is_a_conflict(tmp_path: Path) -> None:
    """A key committed for one record type is not a replay for another: it is a conflict."""
    store = SqliteBusinessStore(tmp_path / "b.db")
    store.write(
        WriteInput(
            operation_key="op-samekey01", task_id="t", tenant="a", record_type="invoice", payload={"x": 1}
        )
    )
    with pytest.raises(WriteConflict):
        store.write(
            WriteInput(
                operation_key="op-samekey01", task_id="t", tenant="a", record_type="refund", payload={"x": 1}
            )
        )
    assert store.count() == 1
