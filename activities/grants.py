"""Remembered grants in the state store: saved by the task that accepted an approve-and-remember
(the ``grants.save`` activity), found by the agent turn for the actions it proposes
(``find_grant``), listed and revoked by people (``agent-worker grants``, the API, the inbox).

``GrantStore`` is the interface; ``SqliteGrantStore`` keeps grants in the data dir, and
``activities.stores.postgres.PostgresGrantStore`` in PostgreSQL for a fleet
(``state_backend=postgres``); ``activities.stores.state.build_grant_store`` picks one. A grant's
record is written once; only its status changes after: ``active`` to ``revoked`` (by a person) or
``void`` (its basis changed: ``schemas.grants.void_reason``), never back.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agent_worker.activities.errors import activity_boundary
from agent_worker.schemas.conditions import ConditionError, evaluate_condition
from agent_worker.schemas.grants import MAX_GRANT_REASON_CHARS, Grant, GrantQuery, in_scope, void_reason
from temporalio import activity

_SCHEMA = """
CREATE TABLE IF NOT EXISTS grants (
    grant_id      TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    tool          TEXT NOT NULL,
    principal     TEXT NOT NULL,
    record        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'active',
    status_reason TEXT,
    status_at     TEXT,
    status_by     TEXT
);
CREATE INDEX IF NOT EXISTS grants_tenant_tool ON grants (tenant, tool, status);
"""


class GrantStore(Protocol):
    """Where remembered grants live. Every method is idempotent and thread-safe."""

    def save(self, grant: Grant) -> None:
        """Store ``grant`` unless a grant with its id is stored already."""
        ...

    def active(self, tenant: str, tool: str) -> list[Grant]:
        """The active grants of ``tenant`` for ``tool``, oldest first."""
        ...

    def listed(self, tenant: str | None = None, *, ended: bool = False) -> list[Grant]:
        """Grants (of ``tenant``, or all), oldest first; revoked and void ones too with ``ended``."""
        ...

    def get(self, grant_id: str) -> Grant | None:
        """The grant with ``grant_id``, or None."""
        ...

    def end(self, grant_id: str, status: str, reason: str, by: str | None = None) -> bool:
        """Mark an active grant ``revoked`` or ``void``, with why (and who); whether it was active."""
        ...


def grant_from_row(row: tuple[Any, ...]) -> Grant:
    """A grant from a store's row: (record, status, status_reason, status_at, status_by)."""
    record, status, reason, at, by = row
    data = json.loads(record) if isinstance(record, str) else record
    return Grant.model_validate(
        {**data, "status": status, "status_reason": reason, "status_at": at, "status_by": by}
    )


class SqliteGrantStore:
    """Grants in SQLite under the data dir (one machine)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)

    def __repr__(self) -> str:
        return f"SqliteGrantStore({str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    _COLUMNS = "record, status, status_reason, status_at, status_by"

    def save(self, grant: Grant) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR IGNORE INTO grants (grant_id, tenant, tool, principal, record, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    grant.grant_id,
                    grant.tenant,
                    grant.tool,
                    grant.principal,
                    json.dumps(grant.stored()),
                    grant.created_at.isoformat(),
                ),
            )

    def active(self, tenant: str, tool: str) -> list[Grant]:
        with self._connect() as db:
            rows = db.execute(
                f"SELECT {self._COLUMNS} FROM grants WHERE tenant = ? AND tool = ? AND status = 'active' "
                "ORDER BY created_at, grant_id",
                (tenant, tool),
            ).fetchall()
        return [grant_from_row(r) for r in rows]

    def listed(self, tenant: str | None = None, *, ended: bool = False) -> list[Grant]:
        sql = f"SELECT {self._COLUMNS} FROM grants WHERE 1 = 1"
        params: list[Any] = []
        if tenant is not None:
            sql += " AND tenant = ?"
            params.append(tenant)
        if not ended:
            sql += " AND status = 'active'"
        with self._connect() as db:
            rows = db.execute(sql + " ORDER BY created_at, grant_id", params).fetchall()
        return [grant_from_row(r) for r in rows]

    def get(self, grant_id: str) -> Grant | None:
        with self._connect() as db:
            row = db.execute(f"SELECT {self._COLUMNS} FROM grants WHERE grant_id = ?", (grant_id,)).fetchone()
        return None if row is None else grant_from_row(row)

    def end(self, grant_id: str, status: str, reason: str, by: str | None = None) -> bool:
        with self._connect() as db:
            changed = db.execute(
                "UPDATE grants SET status = ?, status_reason = ?, status_at = ?, status_by = ? "
                "WHERE grant_id = ? AND status = 'active'",
                (status, reason[:MAX_GRANT_REASON_CHARS], datetime.now(UTC).isoformat(), by, grant_id),
            ).rowcount
        return changed > 0


def find_grant(
    store: GrantStore,
    query: GrantQuery,
    *,
    tool: str,
    effect: str,
    arguments: Mapping[str, Any],
    caller: str,
    tool_schema: str,
    agent_version: str,
    now: datetime,
) -> tuple[Grant | None, list[str]]:
    """The first active grant that answers an action of ``tool`` with ``arguments`` from the task
    ``query`` describes, and the grants found void on the way (each ``"id: why"``; marked void in
    the store). A grant whose basis changed voids itself whether or not its condition would hold."""
    voided: list[str] = []
    found: Grant | None = None
    for grant in store.active(query.tenant, tool):
        if not in_scope(grant, tenant=query.tenant, agent=query.agent, thread=query.thread, tool=tool):
            continue
        why = void_reason(
            grant,
            policy=query.policy,
            tool_schema=tool_schema,
            agent=query.agent,
            agent_version=agent_version,
        )
        if why is not None:
            store.end(grant.grant_id, "void", why)
            voided.append(f"{grant.grant_id}: {why}")
            continue
        if found is not None or (grant.expires_at is not None and grant.expires_at <= now):
            continue
        if grant.remember.when is not None:
            holds = evaluate_condition(
                grant.remember.when,
                args=arguments,
                tool=tool,
                effect=effect,
                agent=query.agent,
                caller=caller,
                tenant=query.tenant,
                labels=query.labels,
            )
            if isinstance(holds, ConditionError) or not holds:
                continue  # a condition that cannot be told never approves
        found = grant
    return found, voided


class GrantActivities:
    """``grants.save`` over one grant store."""

    def __init__(self, store: GrantStore) -> None:
        self.store = store

    @activity.defn(name="grants.save")
    @activity_boundary
    async def save(self, grant: Grant) -> None:
        """Store an accepted approve-and-remember (idempotent: a grant id is stored once)."""
        await asyncio.to_thread(self.store.save, grant)


def describe(grants: Iterable[Grant]) -> list[dict[str, Any]]:
    """Grants as the CLI's and API's listings show them (JSON)."""
    return [g.model_dump(mode="json") for g in grants]


__all__ = ["GrantActivities", "GrantStore", "SqliteGrantStore", "describe", "find_grant", "grant_from_row"]
