"""Business writes and lookups: the ``business.*`` activities and the SQLite store of the embedded
default.

A write carries an operation key derived in the workflow (task id + action call id). The key is
unique in the store and the payload's digest is stored beside it: the same key with the same payload
returns the original receipt (a retry commits nothing new), the same key with a different payload is
a conflict, never an overwrite. ``lookup`` answers whether a key was committed, which is how an
unknown outcome is reconciled before any retry.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from temporalio import activity

from activities.errors import WriteConflict, WriteError, translate_errors
from schemas.digests import canonical_json, digest_bytes
from schemas.writes import LookupInput, LookupResult, WriteInput, WriteOutcome, WriteReceipt

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


class BusinessWriter(Protocol):
    """A business system that honours operation keys."""

    def write(self, input: WriteInput) -> WriteReceipt:
        """Commit the payload under the operation key, or return the receipt it already has."""
        ...

    def lookup(self, operation_key: str) -> WriteReceipt | None:
        """The receipt committed under ``operation_key``, or None."""
        ...


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
        digest = digest_bytes(payload)
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
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
            record_id = "rec-" + input.operation_key.removeprefix("op-")[:16]
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
            db.execute("COMMIT")
        except sqlite3.Error as err:
            # The commit may or may not have reached the file: only a lookup can tell.
            raise WriteError(
                f"sqlite write failed: {err}", code="write_unknown", operation="business.write"
            ) from err
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
        db = self._connect()
        try:
            return self._select(db, operation_key)
        finally:
            db.close()

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


class BusinessActivities:
    """``business.write`` and ``business.lookup`` over one ``BusinessWriter``."""

    def __init__(self, writer: BusinessWriter) -> None:
        self.writer = writer

    @activity.defn(name="business.write")
    @translate_errors
    async def write(self, input: WriteInput) -> WriteReceipt:
        """Commit one write under its operation key (a repeat returns the first receipt)."""
        return await asyncio.to_thread(self.writer.write, input)

    @activity.defn(name="business.lookup")
    @translate_errors
    async def lookup(self, input: LookupInput) -> LookupResult:
        """Whether the operation key was committed, with its receipt."""
        receipt = await asyncio.to_thread(self.writer.lookup, input.operation_key)
        return LookupResult(operation_key=input.operation_key, found=receipt is not None, receipt=receipt)
