"""The SQLite business store: the embedded default, one row per operation key (see ``base.py`` for
the contract). The key is unique and the payload's digest is stored beside it."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from agent_worker.activities.business.base import payload_digest, record_id_for
from agent_worker.activities.errors import WriteConflict, WriteUnavailable, WriteUnknown
from agent_worker.schemas.digests import canonical_json
from agent_worker.schemas.writes import WriteInput, WriteOutcome, WriteReceipt

_SCHEMA = """
CREATE TABLE IF NOT EXISTS business_records (
    record_id      TEXT PRIMARY KEY,
    operation_key  TEXT NOT NULL UNIQUE,
    record_type    TEXT NOT NULL,
    tenant         TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    payload_json   TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    committed_at   TEXT NOT NULL
)
"""


class SqliteBusinessStore:
    """Business records in one SQLite file, one row per operation key."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def write(self, input: WriteInput) -> WriteReceipt:
        payload = canonical_json(input.payload)
        digest = payload_digest(input)
        try:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            # Nothing was sent: the database could not be opened or locked for writing.
            raise WriteUnavailable(f"sqlite unavailable: {err}") from err
        committing = False
        try:
            existing = self._select(db, input.operation_key)
            if existing is not None:
                db.execute("COMMIT")
                if (existing.payload_digest, existing.record_type) != (digest, input.record_type):
                    raise WriteConflict(
                        f"operation key {input.operation_key} is already committed with a different "
                        f"write ({existing.record_type} {existing.payload_digest}, "
                        f"not {input.record_type} {digest})"
                    )
                return existing.model_copy(update={"replayed": True})
            now = datetime.now(UTC)
            record_id = record_id_for(input.operation_key)
            db.execute(
                "INSERT INTO business_records VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record_id,
                    input.operation_key,
                    input.record_type,
                    input.tenant,
                    input.task_id,
                    payload.decode("utf-8"),
                    digest,
                    now.isoformat(),
                ),
            )
            committing = True
            db.execute("COMMIT")
        except sqlite3.Error as err:
            if committing:  # the commit may or may not have reached the file: only a lookup can tell
                raise WriteUnknown(f"sqlite commit failed: {err}") from err
            raise WriteUnavailable(f"sqlite write failed before commit: {err}") from err
        finally:
            db.close()
        return WriteReceipt(
            operation_key=input.operation_key,
            outcome=WriteOutcome.COMMITTED,
            record_id=record_id,
            record_type=input.record_type,
            payload_digest=digest,
            committed_at=now,
        )

    def lookup(self, operation_key: str) -> WriteReceipt | None:
        try:
            db = self._connect()
            try:
                return self._select(db, operation_key)
            finally:
                db.close()
        except sqlite3.Error as err:
            raise WriteUnavailable(f"sqlite lookup failed: {err}", operation="business.lookup") from err

    def payload(self, operation_key: str) -> dict | None:
        """The payload committed under ``operation_key``, or None."""
        db = self._connect()
        try:
            row = db.execute(
                "SELECT payload_json FROM business_records WHERE operation_key = ?", (operation_key,)
            ).fetchone()
        finally:
            db.close()
        return json.loads(row[0]) if row else None

    def count(self, operation_key: str | None = None) -> int:
        """How many records exist (under ``operation_key`` when given)."""
        db = self._connect()
        try:
            if operation_key is None:
                return db.execute("SELECT COUNT(*) FROM business_records").fetchone()[0]
            return db.execute(
                "SELECT COUNT(*) FROM business_records WHERE operation_key = ?", (operation_key,)
            ).fetchone()[0]
        finally:
            db.close()

    @staticmethod
    def _select(db: sqlite3.Connection, operation_key: str) -> WriteReceipt | None:
        row = db.execute(
            "SELECT record_id, record_type, payload_digest, committed_at FROM business_records "
            "WHERE operation_key = ?",
            (operation_key,),
        ).fetchone()
        if row is None:
            return None
        return WriteReceipt(
            operation_key=operation_key,
            outcome=WriteOutcome.COMMITTED,
            record_id=row[0],
            record_type=row[1],
            payload_digest=row[2],
            committed_at=datetime.fromisoformat(row[3]),
        )
