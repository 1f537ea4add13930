"""The grant store behaves the same in SQLite (the data dir) and PostgreSQL (a fleet): saved once by
id, found by tenant and tool while active, voided by ``find_grant`` when its basis changed (and then
never found again), revoked once (a second revoke changes nothing), listed with or without the ended
ones; on PostgreSQL two hosts share them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from agent_worker.activities.grants import GrantStore, find_grant
from agent_worker.activities.stores import postgres_db
from agent_worker.activities.stores.state import build_grant_store, migrate_state
from agent_worker.schemas.grants import Grant, GrantQuery, Remember, grant_id_for, in_scope

from tests.helpers.postgres_server import PostgresServer
from tests.helpers.support import make_config

POLICY = "sha256:" + "1" * 64
SCHEMA = "sha256:" + "2" * 64
VERSION = "sha256:" + "3" * 64
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["local", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], GrantStore]]:
    """``stores(host)``: the grant store of one host; on PostgreSQL every host shares a fresh database,
    locally one machine shares its data dir."""
    if request.param == "local":
        yield lambda host: build_grant_store(make_config(tmp_path / "shared"))
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    database = f"grants_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    dsn = server.dsn_for(database)

    def make(host: str) -> GrantStore:
        config = make_config(tmp_path / host, state_backend="postgres", state_dsn=dsn)
        migrate_state(config)
        return build_grant_store(config)

    yield make
    postgres_db.close_pools()


def grant(request_id: str, *, tenant: str = "acme", when: str | None = None, minutes: int = 0) -> Grant:
    return Grant(
        grant_id=grant_id_for("task-1", "chain-1", request_id),
        principal="finance-lead",
        tenant=tenant,
        tool="pay",
        agent="payer",
        remember=Remember(when=when, until=NOW + timedelta(minutes=minutes) if minutes else None),
        tool_schema=SCHEMA,
        policy=POLICY,
        task_id="task-1",
        run_chain="chain-1",
        request_id=request_id,
        version=VERSION,
        created_at=NOW + timedelta(seconds=len(request_id)),
    )


def query(policy: str = POLICY) -> GrantQuery:
    return GrantQuery(tenant="acme", agent="payer", policy=policy)


def test_grants_are_saved_once_found_while_active_and_ended_once(stores: Callable[[str], GrantStore]) -> None:
    """A grant saved twice is stored once; another tenant's is not found; a revoked one is not found
    and a second revoke (or void) changes nothing; the listing shows ended ones on request only."""
    one, two = stores("host-a"), stores("host-b")
    small = grant("req-1", when="args.amount <= 100")
    one.save(small)
    two.save(small)
    one.save(grant("req-22", tenant="globex"))
    assert [g.grant_id for g in two.active("acme", "pay")] == [small.grant_id]
    assert two.get(small.grant_id) == small
    assert two.end(small.grant_id, "revoked", "too broad", by="cfo") is True
    assert one.end(small.grant_id, "void", "late") is False
    assert one.active("acme", "pay") == []
    ended = one.get(small.grant_id)
    assert ended is not None and (ended.status, ended.status_reason, ended.status_by) == (
        "revoked",
        "too broad",
        "cfo",
    )
    assert [g.tenant for g in one.listed()] == ["globex"]
    assert sorted(g.status for g in one.listed(ended=True)) == ["active", "revoked"]
    assert one.listed("acme") == []


def test_find_grant_matches_the_condition_skips_the_expired_and_voids_a_changed_basis(
    stores: Callable[[str], GrantStore],
) -> None:
    """The first active grant whose condition holds answers; an expired one does not; under another
    policy digest every grant in scope is voided in the store (for every host) and named."""
    store = stores("host-a")
    expired, small, anything = (
        grant("req-1", minutes=-5),
        grant("req-22", when="args.amount <= 100"),
        grant("req-333"),
    )
    for g in (expired, small, anything):
        store.save(g)

    def find(amount: int, policy: str = POLICY) -> tuple[Grant | None, list[str]]:
        return find_grant(
            store,
            query(policy),
            tool="pay",
            effect="write",
            arguments={"amount": amount},
            caller="payer",
            tool_schema=SCHEMA,
            agent_version="",
            now=NOW,
        )

    assert find(50) == (small, [])
    assert find(500) == (anything, [])
    found, voided = find(50, policy="sha256:" + "9" * 64)
    assert found is None and len(voided) == 3 and all("policy changed" in v for v in voided)
    assert stores("host-b").active("acme", "pay") == []
    assert find(50) == (None, [])


def test_a_grants_scope_decides_which_tasks_it_may_answer() -> None:
    """Scope `agent`: the same agent in the tenant; `thread`: the same thread, whatever the agent
    (never a task on no thread); `tenant`: any agent; never another tenant or tool."""
    base = grant("req-1")
    on_thread = base.model_copy(update={"thread": "t-1", "remember": Remember(scope="thread")})
    tenant_wide = base.model_copy(update={"remember": Remember(scope="tenant")})

    def answers(g: Grant, *, agent: str = "payer", thread: str | None = None, tenant: str = "acme") -> bool:
        return in_scope(g, tenant=tenant, agent=agent, thread=thread, tool="pay")

    assert answers(base) and not answers(base, agent="other") and not answers(base, tenant="globex")
    assert answers(on_thread, agent="other", thread="t-1") and not answers(on_thread, thread="t-2")
    assert not answers(on_thread.model_copy(update={"thread": None}))
    assert answers(tenant_wide, agent="other") and not answers(tenant_wide, tenant="globex")
    assert not in_scope(base, tenant="acme", agent="payer", thread=None, tool="refund")
