"""The state database of ``state_backend=postgres``: one connection pool per DSN, and migrations.

Migrations are versioned SQL in ``MIGRATIONS``; ``agent_worker_schema_migrations`` records which are
applied. ``agent-worker migrate`` applies the missing ones. The worker also applies them itself at
start (``check_state_database``), idempotently, under a transaction-scoped advisory lock so that
workers starting together never race; a database role that may not create tables makes the worker
refuse to start, naming ``agent-worker migrate`` (run it once with a role that may). A database
that knows a version this code does not (a newer release migrated it) is used as it is: migrations
only add.

Errors: anything that keeps a statement from completing (connection refused, lost, pool timeout,
missing table or privilege) becomes ``StateUnavailable`` (retryable: every state operation is
idempotent); nothing is swallowed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from agent_worker.activities.errors import StateUnavailable

try:
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as err:  # pragma: no cover - the extra is missing
    raise ImportError(
        f"state_backend=postgres needs psycopg and psycopg-pool: pip install 'agent-worker[postgres]' ({err})"
    ) from err

MIGRATIONS_TABLE = "agent_worker_schema_migrations"
# (version, description, SQL). Append only; never edit a released entry.
MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "journal, admission, revocations, events",
        """
        CREATE TABLE agent_worker_journal (
            task_key    text NOT NULL,
            turn        integer NOT NULL,
            call_index  integer NOT NULL,
            entry       jsonb NOT NULL,
            recorded_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (task_key, turn, call_index)
        );
        CREATE TABLE agent_worker_admission (
            task_id     text PRIMARY KEY,
            tenant      text NOT NULL,
            run_chain   text,
            admitted_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX agent_worker_admission_tenant ON agent_worker_admission (tenant);
        CREATE TABLE agent_worker_revocations (
            principal  text NOT NULL,
            tool       text NOT NULL,
            reason     text NOT NULL,
            revoked_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (principal, tool)
        );
        CREATE TABLE agent_worker_events (
            position  bigserial PRIMARY KEY,
            task_id   text NOT NULL,
            run_chain text NOT NULL,
            seq       integer NOT NULL,
            event     jsonb NOT NULL,
            UNIQUE (task_id, run_chain, seq)
        );
        """,
    ),
    (
        2,
        "notifications",
        """
        CREATE TABLE agent_worker_notifications (
            key      text NOT NULL,
            channel  text NOT NULL,
            taken_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (key, channel)
        );
        """,
    ),
    (
        3,
        "events: the basis of a local delivery",
        # NULL: a committed delivery's (``events.publish``); a number: a local one's, which a later
        # attempt of its workflow task may replace (``activities.events.plan_replace``).
        """
        ALTER TABLE agent_worker_events ADD COLUMN basis bigint;
        """,
    ),
    (
        4,
        "remembered grants",
        """
        CREATE TABLE agent_worker_grants (
            grant_id      text PRIMARY KEY,
            tenant        text NOT NULL,
            tool          text NOT NULL,
            principal     text NOT NULL,
            record        jsonb NOT NULL,
            created_at    timestamptz NOT NULL,
            status        text NOT NULL DEFAULT 'active',
            status_reason text,
            status_at     timestamptz,
            status_by     text
        );
        CREATE INDEX agent_worker_grants_tenant_tool ON agent_worker_grants (tenant, tool, status);
        """,
    ),
]
LATEST = MIGRATIONS[-1][0]
# The tables each store needs, to name the store that cannot be used.
STORE_TABLES = {
    "model-call journal": "agent_worker_journal",
    "tenant admission": "agent_worker_admission",
    "authorizer": "agent_worker_revocations",
    "event sink": "agent_worker_events",
    "notification ledger": "agent_worker_notifications",
    "grant store": "agent_worker_grants",
}
# Two-key advisory locks: (namespace, key). The namespace keeps them apart from anyone else's.
LOCK_MIGRATE = 0x4157_0001
LOCK_TENANT = 0x4157_0002
LOCK_EVENTS = 0x4157_0003
MAX_POOL_SIZE = 16
CONNECT_TIMEOUT = 5.0

_pools: dict[str, ConnectionPool] = {}
_pools_lock = threading.Lock()
T = TypeVar("T")


def new_pool(dsn: str, name: str, max_size: int = MAX_POOL_SIZE) -> ConnectionPool:
    """An unopened pool of autocommit connections to ``dsn`` with the stores' timeouts (building it
    contacts nothing)."""
    return ConnectionPool(
        dsn,
        min_size=1,
        max_size=max_size,
        open=False,
        timeout=CONNECT_TIMEOUT,
        kwargs={"connect_timeout": int(CONNECT_TIMEOUT), "autocommit": True},
        name=name,
    )


def pool_for(dsn: str) -> ConnectionPool:
    """The process's one pool for ``dsn`` (opened on first use; building it contacts nothing)."""
    with _pools_lock:
        pool = _pools.get(dsn)
        if pool is None or pool.closed:
            pool = new_pool(dsn, "agent-worker-state")
            pool.open(wait=False)
            _pools[dsn] = pool
        return pool


def close_pools() -> None:
    """Close every state pool of this process (tests, and a worker on its way out)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


def describe(dsn: str) -> str:
    """host:port/dbname of ``dsn``, without the password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparsable DSN)"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def run(dsn: str, operation: str, work: Callable[[psycopg.Connection[Any]], T]) -> T:
    """``work`` on a pooled connection; what keeps it from completing becomes ``StateUnavailable``."""
    try:
        with pool_for(dsn).connection() as conn:
            return work(conn)
    except (
        psycopg.OperationalError,
        psycopg.errors.UndefinedTable,
        psycopg.errors.InsufficientPrivilege,
        PoolTimeout,
    ) as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise StateUnavailable(f"state database {describe(dsn)}: {detail}", operation=operation) from None


def applied_versions(conn: psycopg.Connection[Any]) -> set[int]:
    """The migration versions the database records (none when the table is missing)."""
    exists = conn.execute("SELECT to_regclass(%s)", (MIGRATIONS_TABLE,)).fetchone()
    if exists is None or exists[0] is None:
        return set()
    return {row[0] for row in conn.execute(f"SELECT version FROM {MIGRATIONS_TABLE}")}


def migrate(dsn: str) -> list[int]:
    """Apply the missing migrations (each in its own transaction, under the advisory lock); the
    versions applied now."""

    def work(conn: psycopg.Connection[Any]) -> list[int]:
        done: list[int] = []
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_MIGRATE,))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (version integer PRIMARY KEY, "
                "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            have = applied_versions(conn)
            for version, description, sql in MIGRATIONS:
                if version in have:
                    continue
                conn.execute(sql)  # type: ignore[arg-type]
                conn.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE} (version, description) VALUES (%s, %s)",
                    (version, description),
                )
                done.append(version)
        return done

    return run(dsn, "state.migrate", work)


def pending(dsn: str) -> list[int]:
    """The migrations the database lacks."""
    have = run(dsn, "state.check", applied_versions)
    return [version for version, _, _ in MIGRATIONS if version not in have]


__all__ = [
    "LATEST",
    "MIGRATIONS",
    "STORE_TABLES",
    "close_pools",
    "describe",
    "migrate",
    "pending",
    "pool_for",
    "run",
]
