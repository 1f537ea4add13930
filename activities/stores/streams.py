"""Stream backends: where a task's live stream (``schemas.streams.StreamEntry``) is kept.

One protocol, two backends, one factory (``activities.stores.state.build_stream_backend``, from
``stream_backend``):

- ``local``: ``SqliteStreamBackend``, a SQLite file in the data dir (WAL): the embedded default,
  for writers and readers on one host;
- ``redis``: ``RedisStreamBackend`` (``activities.stores.redis_streams``, extra ``redis``): Redis
  Streams at ``stream_url``, for a fleet.

A stream is keyed by task id and run chain (a reused task id starts a new stream). Offsets are
1, 2, 3, ... per stream, assigned by the backend as it appends (atomically, so two writers on two
hosts interleave without a gap or a duplicate); ``read(after=n)`` answers the entries after offset
``n`` in order. Each stream keeps its last ``stream_retention`` entries; a reader further behind
finds the first offset it gets past ``after + 1``, a gap it can name.

Calls block (SQLite, a network round trip): async code runs them in a thread.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol

from agent_worker.schemas.streams import StreamEntry

# Who wrote an entry (``StreamEntry.writer``): this worker process.
WRITER = f"{socket.gethostname()}:{os.getpid()}"
# A blocking read waits at most this long per call (a reader loops).
MAX_BLOCK_MS = 5_000
_POLL_SECONDS = 0.05


class StreamBackend(Protocol):
    """Appends to and reads a task's stream."""

    def append(self, task_id: str, run_chain: str | None, entries: list[StreamEntry]) -> list[int]:
        """Append ``entries`` in order; the offsets they got."""
        ...

    def append_many(
        self, streams: dict[tuple[str, str | None], list[StreamEntry]]
    ) -> dict[tuple[str, str | None], list[int]]:
        """``append`` to each (task id, run chain) stream in one call to the store (the live-event
        tap's batches span many tasks); each non-empty stream's offsets."""
        ...

    def read(
        self, task_id: str, run_chain: str | None, after: int = 0, limit: int = 500, block_ms: int = 0
    ) -> list[StreamEntry]:
        """Up to ``limit`` entries after offset ``after``, in order (their ``offset`` set); with
        ``block_ms``, wait that long for one when there is none yet."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


def stream_key(task_id: str, run_chain: str | None) -> str:
    """The stream of a task's run chain."""
    return f"{task_id}\x00{run_chain or ''}"


def _wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL. Several connections opening a new file at once (a worker's turn
    streams, its live-event tap, a reader) can be refused the switch with "database is locked" at
    once, without the busy timeout's wait: so ask again for as long as that timeout."""
    deadline = time.monotonic() + 10
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(_POLL_SECONDS)


class SqliteStreamBackend:
    """Streams in one SQLite file (WAL, so readers never wait for a writer)."""

    def __init__(self, path: Path, retention: int = 10_000) -> None:
        self.path = Path(path)
        self.retention = retention
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
            _wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS stream_entries (stream TEXT NOT NULL, "
                "pos INTEGER NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (stream, pos)) WITHOUT ROWID"
            )
            self._conn = conn
        return self._conn

    def append(self, task_id: str, run_chain: str | None, entries: list[StreamEntry]) -> list[int]:
        return self.append_many({(task_id, run_chain): entries}).get((task_id, run_chain), [])

    def append_many(
        self, streams: dict[tuple[str, str | None], list[StreamEntry]]
    ) -> dict[tuple[str, str | None], list[int]]:
        """``append`` to several streams in one transaction (the live-event tap's batches span
        many tasks: one commit for all of them, not one each); each stream's offsets."""
        streams = {k: v for k, v in streams.items() if v}
        if not streams:
            return {}
        offsets: dict[tuple[str, str | None], list[int]] = {}
        with self._lock:
            db = self._db()
            # IMMEDIATE: the offsets are read and written under the write lock, so two processes
            # appending to one stream never take the same offset.
            db.execute("BEGIN IMMEDIATE")
            try:
                for (task_id, run_chain), entries in streams.items():
                    key = stream_key(task_id, run_chain)
                    (last,) = db.execute(
                        "SELECT COALESCE(MAX(pos), 0) FROM stream_entries WHERE stream = ?", (key,)
                    ).fetchone()
                    got = offsets[(task_id, run_chain)] = list(range(last + 1, last + 1 + len(entries)))
                    db.executemany(
                        "INSERT INTO stream_entries (stream, pos, entry) VALUES (?, ?, ?)",
                        [
                            (key, n, e.model_copy(update={"offset": n}).model_dump_json())
                            for n, e in zip(got, entries, strict=True)
                        ],
                    )
                    if got[-1] > self.retention:  # (a stream shorter than that has nothing to drop)
                        db.execute(
                            "DELETE FROM stream_entries WHERE stream = ? AND pos <= ?",
                            (key, got[-1] - self.retention),
                        )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return offsets

    def read(
        self, task_id: str, run_chain: str | None, after: int = 0, limit: int = 500, block_ms: int = 0
    ) -> list[StreamEntry]:
        key = stream_key(task_id, run_chain)
        deadline = time.monotonic() + min(block_ms, MAX_BLOCK_MS) / 1000
        while True:
            with self._lock:
                rows = (
                    self._db()
                    .execute(
                        "SELECT entry FROM stream_entries WHERE stream = ? AND pos > ? ORDER BY pos LIMIT ?",
                        (key, after, limit),
                    )
                    .fetchall()
                )
            if rows or time.monotonic() >= deadline:
                return [StreamEntry.model_validate_json(row[0]) for row in rows]
            time.sleep(_POLL_SECONDS)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


__all__ = ["MAX_BLOCK_MS", "WRITER", "SqliteStreamBackend", "StreamBackend", "stream_key"]
