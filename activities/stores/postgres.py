"""The shared state in PostgreSQL (``state_backend=postgres``): the model-call journal, tenant
admission, the authorizer's revocations and the event sink, for a fleet of workers on many hosts.

Each class keeps exactly the behaviour of its local counterpart (same methods, same answers), over
the process's one connection pool per DSN (``postgres_db.pool_for``); the tables come from the
migrations in ``postgres_db``. Every method is thread-safe (activities call them from worker
threads) and raises ``StateUnavailable`` (retryable) when the database cannot answer.

- ``PostgresJournal``: one row per (task, turn, call index); ``record`` overwrites, as the local file
  replace does.
- ``PostgresAdmission``: the cap holds across workers: an admission runs in one transaction under an
  advisory lock per tenant, so two workers never both take the last place.
- ``PostgresAuthorizer``: a revocation list, allowed unless revoked.
- ``PostgresGrantStore``: remembered grants (``activities.grants``), their status changed in place.
- ``PostgresEventSink``: events in arrival order; a publish runs under an advisory lock per task and
  drops the events whose ``seq`` is not above the last stored one of their run chain.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

import structlog
from agent_worker.activities.agent.journal import ModelCallJournal
from agent_worker.activities.authz import ALL_TOOLS
from agent_worker.activities.events import plan_replace
from agent_worker.activities.grants import grant_from_row
from agent_worker.activities.stores import postgres_db as db
from agent_worker.activities.tenants import TenantAdmission
from agent_worker.schemas.authz import AuthzDecision, AuthzRequest
from agent_worker.schemas.events import Event
from agent_worker.schemas.grants import MAX_GRANT_REASON_CHARS, Grant
from temporalio.client import Client

log = structlog.get_logger(__name__)

# A run chain stored for events of tasks started before run chains (the column is part of a key).
_NO_CHAIN = ""


def _task_key(task_id: str) -> str:
    """The journal's key of a task: a digest, as the local journal's directory name (the key joins
    the task id and its run chain with a NUL, which a PostgreSQL text column refuses)."""
    return hashlib.sha256(task_id.encode("utf-8")).hexdigest()


class PostgresJournal(ModelCallJournal):
    """Completed model calls, one row per call, shared by every worker of the fleet."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __repr__(self) -> str:
        return f"PostgresJournal({db.describe(self.dsn)!r})"

    def read_entry(self, task_id: str, turn: int, index: int) -> dict[str, Any] | None:
        row = db.run(
            self.dsn,
            "journal.lookup",
            lambda conn: conn.execute(
                "SELECT entry FROM agent_worker_journal "
                "WHERE task_key = %s AND turn = %s AND call_index = %s",
                (_task_key(task_id), turn, index),
            ).fetchone(),
        )
        return None if row is None else row[0]

    def write_entry(self, task_id: str, turn: int, index: int, entry: dict[str, Any]) -> None:
        db.run(
            self.dsn,
            "journal.record",
            lambda conn: conn.execute(
                "INSERT INTO agent_worker_journal (task_key, turn, call_index, entry) "
                "VALUES (%s, %s, %s, %s::jsonb) ON CONFLICT (task_key, turn, call_index) "
                "DO UPDATE SET entry = EXCLUDED.entry, recorded_at = now()",
                (_task_key(task_id), turn, index, json.dumps(entry)),
            ),
        )


class PostgresAdmission(TenantAdmission):
    """Admits tasks up to each tenant's cap, counted over the whole fleet (``TenantAdmission``'s
    ``admit``, with its clean-up of ended tasks, over a shared table)."""

    def __init__(self, dsn: str, caps: Mapping[str, int], client: Client) -> None:
        self.dsn = dsn
        self.caps = dict(caps)
        self.client = client

    def __repr__(self) -> str:
        return f"PostgresAdmission({db.describe(self.dsn)!r})"

    def _try_admit(
        self, task_id: str, tenant: str, cap: int, chain: str | None
    ) -> tuple[bool, int, list[tuple[str, str | None]]]:
        def work(conn: Any) -> tuple[bool, int, list[tuple[str, str | None]]]:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (db.LOCK_TENANT, tenant))
                held = conn.execute(
                    "SELECT run_chain FROM agent_worker_admission WHERE task_id = %s FOR UPDATE", (task_id,)
                ).fetchone()
                if held is not None and held[0] == chain:
                    return True, 0, []  # already admitted (a retried attempt)
                if held is not None:
                    # An earlier run of a reused task id ended without releasing: its place is free.
                    conn.execute("DELETE FROM agent_worker_admission WHERE task_id = %s", (task_id,))
                others = [
                    (row[0], row[1])
                    for row in conn.execute(
                        "SELECT task_id, run_chain FROM agent_worker_admission WHERE tenant = %s "
                        "ORDER BY admitted_at",
                        (tenant,),
                    )
                ]
                if len(others) >= cap:
                    return False, len(others), others
                conn.execute(
                    "INSERT INTO agent_worker_admission (task_id, tenant, run_chain) VALUES (%s, %s, %s)",
                    (task_id, tenant, chain),
                )
                return True, len(others) + 1, []

        return db.run(self.dsn, "tenants.admit", work)

    def release(self, task_id: str, chain: str | None = None) -> None:
        """Free the task's place (only its own run chain's, when it has one)."""
        sql = "DELETE FROM agent_worker_admission WHERE task_id = %s"
        params: tuple[Any, ...] = (task_id,)
        if chain is not None:
            sql += " AND run_chain IS NOT DISTINCT FROM %s"
            params = (task_id, chain)
        db.run(self.dsn, "tenants.release", lambda conn: conn.execute(sql, params))


class PostgresAuthorizer:
    """A revocation list in PostgreSQL: everything the policy grants is allowed unless revoked."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __repr__(self) -> str:
        return f"PostgresAuthorizer({db.describe(self.dsn)!r})"

    def check(self, request: AuthzRequest) -> AuthzDecision:
        row = db.run(
            self.dsn,
            "authz.check",
            lambda conn: conn.execute(
                "SELECT tool, reason, revoked_at FROM agent_worker_revocations "
                "WHERE principal = %s AND tool IN (%s, %s) ORDER BY tool = %s DESC LIMIT 1",
                (request.principal, request.tool, ALL_TOOLS, ALL_TOOLS),
            ).fetchone(),
        )
        if row is None:
            return AuthzDecision(allowed=True, reason="not revoked")
        scope = "every tool" if row[0] == ALL_TOOLS else row[0]
        return AuthzDecision(
            allowed=False,
            reason=f"{request.principal}'s permission for {scope} was revoked at "
            f"{row[2].isoformat()}: {row[1]}",
        )

    def revoke(self, principal: str, tool: str = ALL_TOOLS, reason: str = "revoked") -> None:
        """Revoke ``principal``'s permission for ``tool`` (or every tool)."""
        db.run(
            self.dsn,
            "authz.revoke",
            lambda conn: conn.execute(
                "INSERT INTO agent_worker_revocations (principal, tool, reason) VALUES (%s, %s, %s) "
                "ON CONFLICT (principal, tool) DO UPDATE SET reason = EXCLUDED.reason, revoked_at = now()",
                (principal, tool, reason),
            ),
        )

    def grant(self, principal: str, tool: str = ALL_TOOLS) -> bool:
        """Lift a revocation; whether there was one."""
        return db.run(
            self.dsn,
            "authz.grant",
            lambda conn: (
                conn.execute(
                    "DELETE FROM agent_worker_revocations WHERE principal = %s AND tool = %s",
                    (principal, tool),
                ).rowcount
                > 0
            ),
        )


class PostgresNotificationLedger:
    """What each notifier took, by notification key, shared by the fleet (``activities.notify``)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __repr__(self) -> str:
        return f"PostgresNotificationLedger({db.describe(self.dsn)!r})"

    def taken(self, key: str, channel: str) -> bool:
        row = db.run(
            self.dsn,
            "notify.send",
            lambda conn: conn.execute(
                "SELECT 1 FROM agent_worker_notifications WHERE key = %s AND channel = %s", (key, channel)
            ).fetchone(),
        )
        return row is not None

    def record(self, key: str, channel: str) -> None:
        db.run(
            self.dsn,
            "notify.send",
            lambda conn: conn.execute(
                "INSERT INTO agent_worker_notifications (key, channel) VALUES (%s, %s) "
                "ON CONFLICT DO NOTHING",
                (key, channel),
            ),
        )


class PostgresEventSink:
    """Task events in one table, in arrival order, exactly once per (task, run chain, seq)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __repr__(self) -> str:
        return f"PostgresEventSink({db.describe(self.dsn)!r})"

    def publish(self, task_id: str, events: list[Event]) -> int:
        def work(conn: Any) -> int:
            with conn.transaction():
                # A zombie attempt and its retry never interleave.
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (db.LOCK_EVENTS, task_id))
                last: dict[str | None, int] = {}
                for chain in {e.run_chain for e in events}:
                    row = conn.execute(
                        "SELECT coalesce(max(seq), 0) FROM agent_worker_events "
                        "WHERE task_id = %s AND run_chain = %s",
                        (task_id, chain or _NO_CHAIN),
                    ).fetchone()
                    last[chain] = row[0]
                new = [e for e in events if e.seq > last[e.run_chain]]
                if new:
                    with conn.cursor() as cur:
                        cur.executemany(
                            "INSERT INTO agent_worker_events (task_id, run_chain, seq, event) "
                            "VALUES (%s, %s, %s, %s::jsonb)",
                            [
                                (task_id, e.run_chain or _NO_CHAIN, e.seq, e.model_dump_json(by_alias=True))
                                for e in new
                            ],
                        )
                return len(new)

        return db.run(self.dsn, "events.publish", work)

    def publish_from(self, task_id: str, events: list[Event], basis: int) -> tuple[int, int]:
        """Store a local delivery (``activities.events.plan_replace``): (new, replaced)."""
        if not events:
            return 0, 0
        chain, first = events[0].run_chain or _NO_CHAIN, events[0].seq

        def work(conn: Any) -> tuple[int, int]:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (db.LOCK_EVENTS, task_id))
                rows = conn.execute(
                    "SELECT seq, basis FROM agent_worker_events "
                    "WHERE task_id = %s AND run_chain = %s AND seq >= %s",
                    (task_id, chain, first),
                ).fetchall()
                take, drop = plan_replace(dict(rows), basis)
                if not take:
                    return 0, 0
                if drop:
                    conn.execute(
                        "DELETE FROM agent_worker_events WHERE task_id = %s AND run_chain = %s "
                        "AND seq = ANY(%s)",
                        (task_id, chain, sorted(drop)),
                    )
                held = {seq for seq, _ in rows} - drop
                new = [e for e in events if e.seq not in held]
                if new:
                    with conn.cursor() as cur:
                        cur.executemany(
                            "INSERT INTO agent_worker_events (task_id, run_chain, seq, event, basis) "
                            "VALUES (%s, %s, %s, %s::jsonb, %s)",
                            [(task_id, chain, e.seq, e.model_dump_json(by_alias=True), basis) for e in new],
                        )
                return len(new), len(drop)

        return db.run(self.dsn, "events.publish", work)

    def _select(self, task_id: str, chain: str | None, *, one_chain: bool) -> list[Event]:
        sql = "SELECT event FROM agent_worker_events WHERE task_id = %s"
        params: tuple[Any, ...] = (task_id,)
        if one_chain:
            sql += " AND run_chain = %s"
            params = (task_id, chain or _NO_CHAIN)
        rows = db.run(
            self.dsn, "events.read", lambda conn: conn.execute(sql + " ORDER BY position", params).fetchall()
        )
        return [Event.model_validate(row[0]) for row in rows]

    def read(self, task_id: str) -> Iterator[Event]:
        """The task id's stored events, in order (of every run that used the id)."""
        return iter(self._select(task_id, None, one_chain=False))

    def read_chain(self, task_id: str, run_chain: str | None) -> Iterator[Event]:
        """The stored events of one run chain of the task id (None: a task started before run
        chains), in order."""
        return iter(self._select(task_id, run_chain, one_chain=True))


__all__ = ["PostgresAdmission", "PostgresAuthorizer", "PostgresEventSink", "PostgresJournal"]


class PostgresGrantStore:
    """Remembered grants in PostgreSQL, shared by the fleet (``activities.grants.GrantStore``)."""

    _COLUMNS = "record, status, status_reason, status_at, status_by"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __repr__(self) -> str:
        return f"PostgresGrantStore({db.describe(self.dsn)!r})"

    def save(self, grant: Grant) -> None:
        db.run(
            self.dsn,
            "grants.save",
            lambda conn: conn.execute(
                "INSERT INTO agent_worker_grants (grant_id, tenant, tool, principal, record, created_at) "
                "VALUES (%s, %s, %s, %s, %s::jsonb, %s) ON CONFLICT (grant_id) DO NOTHING",
                (
                    grant.grant_id,
                    grant.tenant,
                    grant.tool,
                    grant.principal,
                    json.dumps(grant.stored()),
                    grant.created_at,
                ),
            ),
        )

    def _select(self, where: str, params: tuple[Any, ...]) -> list[Grant]:
        rows = db.run(
            self.dsn,
            "grants.read",
            lambda conn: conn.execute(
                f"SELECT {self._COLUMNS} FROM agent_worker_grants WHERE {where} "
                "ORDER BY created_at, grant_id",
                params,
            ).fetchall(),
        )
        return [grant_from_row(tuple(r)) for r in rows]

    def active(self, tenant: str, tool: str) -> list[Grant]:
        return self._select("tenant = %s AND tool = %s AND status = 'active'", (tenant, tool))

    def listed(self, tenant: str | None = None, *, ended: bool = False) -> list[Grant]:
        where, params = ["TRUE"], []
        if tenant is not None:
            where.append("tenant = %s")
            params.append(tenant)
        if not ended:
            where.append("status = 'active'")
        return self._select(" AND ".join(where), tuple(params))

    def get(self, grant_id: str) -> Grant | None:
        found = self._select("grant_id = %s", (grant_id,))
        return found[0] if found else None

    def end(self, grant_id: str, status: str, reason: str, by: str | None = None) -> bool:
        return db.run(
            self.dsn,
            "grants.end",
            lambda conn: (
                conn.execute(
                    "UPDATE agent_worker_grants SET status = %s, status_reason = %s, status_at = now(), "
                    "status_by = %s WHERE grant_id = %s AND status = 'active'",
                    (status, reason[:MAX_GRANT_REASON_CHARS], by, grant_id),
                ).rowcount
                > 0
            ),
        )
