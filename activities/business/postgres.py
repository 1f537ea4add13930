"""The PostgreSQL business store: the SQLite adapter's table and semantics in a server every worker
shares (see ``base.py`` for the contract). Needs ``pip install 'agent-worker[postgres]'`` (psycopg 3).

Each call opens its own connection, so a failed connect always happens before anything was sent, and
no call inherits a connection that a server restart silently killed. The write is a single
autocommit statement, ``INSERT ... ON CONFLICT DO NOTHING RETURNING ...``: the server commits it
before it answers, so the statement's answer is the commit's answer. When it inserts nothing, the
key's existing row is read back and compared. The conflict names no column on purpose: concurrent
writes of one key can meet first on the record id (the primary key, derived from the key), and a
conflict target of ``operation_key`` alone let that one fail as a unique violation.

What each failure means::

    connecting fails (refused, server down, auth)      WriteUnavailable   nothing was sent
    the INSERT was sent and the connection is lost     WriteUnknown       it may have committed
      (reset, backend terminated, commit answer lost)                     before the loss: lookup
    the server answers the INSERT with an error and    WriteUnavailable   the statement's implicit
      keeps the connection (lock timeout, deadlock)                       transaction rolled back
      ...an integrity or data error                    WriteError         the same input would fail
                                                       "write_invalid"    the same way: not retried
    nothing inserted, and the key has no row: the      WriteError         not retried
      record id derived from it belongs to another key "write_invalid"
    the key holds another record type or payload       WriteConflict      nothing is overwritten
    reading the key's existing row fails               WriteUnavailable   our INSERT did nothing
    any lookup failure                                 WriteUnavailable(operation="business.lookup")
    psycopg is not installed                           WriteError "backend_unavailable", not retried
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agent_worker.activities.business.base import payload_digest, record_id_for
from agent_worker.activities.errors import WriteConflict, WriteError, WriteUnavailable, WriteUnknown
from agent_worker.schemas.digests import canonical_json
from agent_worker.schemas.writes import WriteInput, WriteOutcome, WriteReceipt

if TYPE_CHECKING:
    import psycopg

# payload_json keeps the exact canonical JSON the digest was taken of (JSONB would re-serialize it).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    record_id      TEXT PRIMARY KEY,
    operation_key  TEXT NOT NULL UNIQUE,
    record_type    TEXT NOT NULL,
    tenant         TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    payload_json   TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    committed_at   TIMESTAMPTZ NOT NULL
)
"""
_COLUMNS = "record_id, record_type, payload_digest, committed_at"
_INSTALL_HINT = "the postgres business writer needs psycopg: pip install 'agent-worker[postgres]'"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as err:
        raise WriteError(
            f"{_INSTALL_HINT} ({err})", code="backend_unavailable", operation="business.write", retryable="no"
        ) from err
    return psycopg


class PostgresBusinessStore:
    """Business records in a PostgreSQL table, one row per operation key. Safe to share between
    threads: no connection outlives a call.

    Args:
        dsn: a libpq connection string or URL.
        table: the table's name, optionally schema-qualified (``"schema.table"``); created if missing.
        connect_timeout: seconds to wait for a connection before the call fails as unavailable.
    """

    def __init__(self, dsn: str, *, table: str = "business_records", connect_timeout: float = 10) -> None:
        self._pg = _psycopg()
        self.dsn = dsn
        self.table = table
        self.connect_timeout = connect_timeout
        self._table = self._pg.sql.Identifier(*table.split("."))
        try:
            with self._connect(autocommit=False) as conn:
                # Concurrent CREATE TABLE IF NOT EXISTS can still collide in the catalog; serialize it.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"agent-worker:{table}",))
                conn.execute(self._sql(_SCHEMA))
        except self._pg.Error as err:
            raise WriteUnavailable(
                f"postgres: cannot create table {table!r}: {err}", operation="business.setup"
            ) from err

    def write(self, input: WriteInput) -> WriteReceipt:
        """Commit under the operation key, or return the receipt the key already has.

        Raises:
            WriteConflict: the key is committed with another record type or payload.
            WriteUnavailable: the write certainly did not apply (see the module docstring).
            WriteUnknown: the connection was lost after the INSERT was sent; look the key up.
            WriteError: ``write_invalid``, the server refused this input for good.
        """
        pg = self._pg
        digest = payload_digest(input)
        try:
            conn = self._connect()
        except pg.Error as err:
            raise WriteUnavailable(f"postgres unavailable: {err}") from err
        try:
            try:
                row = conn.execute(
                    self._sql(
                        "INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                        f"ON CONFLICT DO NOTHING RETURNING {_COLUMNS}"
                    ),
                    (
                        record_id_for(input.operation_key),
                        input.operation_key,
                        input.record_type,
                        input.tenant,
                        input.task_id,
                        canonical_json(input.payload).decode("utf-8"),
                        digest,
                        datetime.now(UTC),
                    ),
                ).fetchone()
            except pg.Error as err:
                if conn.broken or conn.closed:
                    raise WriteUnknown(
                        f"postgres connection lost after the write was sent: {err}; "
                        f"look up {input.operation_key} before retrying"
                    ) from err
                if isinstance(err, pg.IntegrityError | pg.DataError):
                    raise WriteError(
                        f"postgres refused the write of {input.operation_key}: {err}",
                        code="write_invalid",
                        operation="business.write",
                        retryable="no",
                    ) from err
                raise WriteUnavailable(f"postgres refused the write, nothing was committed: {err}") from err
            if row is not None:
                return self._receipt(input.operation_key, row)
            # The key (or its record id) was taken; a conflicting insert still in flight was waited
            # for, so the row is committed and this fresh autocommit snapshot sees it.
            try:
                existing = self._select(conn, input.operation_key)
            except pg.Error as err:
                raise WriteUnavailable(f"postgres: cannot read the existing record: {err}") from err
        finally:
            conn.close()
        if existing is None:
            raise WriteError(
                f"postgres refused the write of {input.operation_key}: its record id "
                f"{record_id_for(input.operation_key)} belongs to another operation key",
                code="write_invalid",
                operation="business.write",
                retryable="no",
            )
        if (existing.payload_digest, existing.record_type) != (digest, input.record_type):
            raise WriteConflict(
                f"operation key {input.operation_key} is already committed with a different write "
                f"({existing.record_type} {existing.payload_digest}, not {input.record_type} {digest})"
            )
        return existing.model_copy(update={"replayed": True})

    def lookup(self, operation_key: str) -> WriteReceipt | None:
        """The receipt committed under ``operation_key``, or None.

        Raises:
            WriteUnavailable: the server could not be asked (``operation="business.lookup"``).
        """
        try:
            with self._connect() as conn:
                return self._select(conn, operation_key)
        except self._pg.Error as err:
            raise WriteUnavailable(f"postgres lookup failed: {err}", operation="business.lookup") from err

    def payload(self, operation_key: str) -> dict | None:
        """The payload committed under ``operation_key``, or None."""
        row = self._fetch_one("SELECT payload_json FROM {table} WHERE operation_key = %s", (operation_key,))
        return json.loads(row[0]) if row else None

    def count(self, operation_key: str | None = None) -> int:
        """How many records exist (under ``operation_key`` when given)."""
        if operation_key is None:
            return self._fetch_one("SELECT COUNT(*) FROM {table}", ())[0]
        return self._fetch_one("SELECT COUNT(*) FROM {table} WHERE operation_key = %s", (operation_key,))[0]

    def close(self) -> None:
        """Nothing to release: no connection outlives a call. Kept so workers can close any writer."""

    def _connect(self, *, autocommit: bool = True) -> psycopg.Connection:
        return self._pg.connect(self.dsn, autocommit=autocommit, connect_timeout=self.connect_timeout)

    def _sql(self, template: str) -> psycopg.sql.SQL:
        return self._pg.sql.SQL(template).format(table=self._table)

    def _fetch_one(self, template: str, params: tuple) -> tuple:
        try:
            with self._connect() as conn:
                return conn.execute(self._sql(template), params).fetchone()
        except self._pg.Error as err:
            raise WriteUnavailable(f"postgres query failed: {err}", operation="business.lookup") from err

    def _select(self, conn: psycopg.Connection, operation_key: str) -> WriteReceipt | None:
        row = conn.execute(
            self._sql(f"SELECT {_COLUMNS} FROM {{table}} WHERE operation_key = %s"), (operation_key,)
        ).fetchone()
        return None if row is None else self._receipt(operation_key, row)

    @staticmethod
    def _receipt(operation_key: str, row: tuple) -> WriteReceipt:
        record_id, record_type, digest, committed_at = row
        return WriteReceipt(
            operation_key=operation_key,
            outcome=WriteOutcome.COMMITTED,
            record_id=record_id,
            record_type=record_type,
            payload_digest=digest,
            committed_at=committed_at.astimezone(UTC),
        )


def postgres_writer(dsn: str) -> PostgresBusinessStore:
    """The factory for
    ``AGENT_WORKER_BUSINESS_WRITER=agent_worker.activities.business.postgres:postgres_writer``."""
    return PostgresBusinessStore(dsn)
