"""The shared state stores (model-call journal, tenant admission, authorizer, event sink) behave the
same on the local backend and on PostgreSQL: one suite, parametrized; every store is built through
the config's factories, and "two hosts" are two stores with separate data dirs. On PostgreSQL the
state is shared across them, a worker whose database is down refuses to start naming the store, and
a task on a real worker leaves its events readable through the CLI from the database."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_worker.activities.events import plan_replace
from agent_worker.activities.stores import postgres_db
from agent_worker.activities.stores.state import (
    build_admission,
    build_authorizer,
    build_event_sink,
    build_journal,
    migrate_state,
)
from agent_worker.schemas.authz import AuthzRequest
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.events import Event, delivery_basis
from agent_worker.schemas.tasks import TaskPhase
from agents.items import ModelResponse
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from pydantic import SecretStr
from temporalio.client import Client, WorkflowHandle

from tests.helpers.agents import CALL_LOG_ENV
from tests.helpers.postgres_server import PostgresServer, start_postgres
from tests.helpers.support import (
    REPO,
    DevServer,
    TaskEnv,
    connect,
    example_spec,
    make_config,
    run_cli,
    running_worker,
    spawn_worker,
)

Host = Callable[[str], WorkerConfig]
TASK = "task-1\x00chain-1"  # activities.agent.turn.journal_key


def _fresh_database(server: PostgresServer) -> str:
    database = f"state_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    return server.dsn_for(database)


@pytest.fixture(params=["local", "postgres"])
def host(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Host]:
    """``host(name)``: the config of one host of a fleet, with its own data dir; on PostgreSQL all
    hosts share one freshly migrated database. Local hosts share nothing but, for the behaviour
    tests, the one data dir ``tmp_path/shared`` (a single machine)."""
    backend = request.param
    if backend == "local":
        yield lambda name: make_config(tmp_path / "shared")
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    dsn = _fresh_database(server)
    configs: dict[str, WorkerConfig] = {}

    def make(name: str) -> WorkerConfig:
        if name not in configs:
            configs[name] = make_config(tmp_path / name, state_backend="postgres", state_dsn=dsn)
            migrate_state(configs[name])
        return configs[name]

    yield make
    postgres_db.close_pools()


def _response(text: str) -> ModelResponse:
    message = ResponseOutputMessage(
        id="msg-1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )
    return ModelResponse(output=[message], usage=Usage(requests=1, input_tokens=3), response_id="resp-1")


def _event(task_id: str, chain: str | None, seq: int) -> Event:
    return Event.model_validate(
        {
            "event_id": f"{task_id}/{chain}/{seq}",
            "task_id": task_id,
            "run_chain": chain,
            "seq": seq,
            "type": "phase.changed",
            "at": datetime(2026, 1, 1, tzinfo=UTC),
            "phase": "running",
            "data": {"seq": seq},
        }
    )


def test_a_journaled_model_call_is_answered_on_another_host_only_for_the_same_input(host: Host) -> None:
    """A call recorded on host A is found by host B under the same task, turn, index and input
    digest, with its record; another digest, turn or task finds nothing; recording again replaces.
    The key is what turns use: the task id and its run chain joined by a NUL."""
    a, b = build_journal(host("a")), build_journal(host("b"))
    assert b.lookup(TASK, 1, 0, "sha256:in") is None
    a.record(TASK, 1, 0, "sha256:in", _response("first"), {"model": "m1"})
    found = b.lookup_call(TASK, 1, 0, "sha256:in")
    assert found is not None
    response, call = found
    assert response.output[0].content[0].text == "first"  # type: ignore[union-attr]
    assert response.usage.input_tokens == 3 and response.response_id == "resp-1"
    assert call == {"model": "m1"}
    assert b.lookup(TASK, 1, 0, "sha256:other") is None
    assert b.lookup(TASK, 2, 0, "sha256:in") is None and b.lookup("task-2", 1, 0, "sha256:in") is None
    a.record(TASK, 1, 0, "sha256:new", _response("second"))
    again = b.lookup(TASK, 1, 0, "sha256:new")
    assert again is not None and again.output[0].content[0].text == "second"  # type: ignore[union-attr]


def test_a_flood_tenant_gets_exactly_its_cap_across_two_hosts(host: Host) -> None:
    """Two admission objects (two hosts) take 40 admissions of a tenant capped at 3 at once, from
    many threads: exactly 3 are admitted, and the others are refused seeing the same 3."""
    caps = {"flood": 3}
    admissions = [
        build_admission(h.model_copy(update={"tenant_caps": caps}), None) for h in (host("a"), host("b"))
    ]  # type: ignore[arg-type]
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(lambda i: admissions[i % 2]._try_admit(f"flood-{i}", "flood", 3, f"c{i}"), range(40))
        )
    admitted = [answer for answer in answers if answer[0]]
    assert len(admitted) == 3
    assert all(running == 3 and len(others) == 3 for ok, running, others in answers if not ok)
    assert admissions[0]._try_admit("quiet-1", "quiet", 3, "q")[0]  # other tenants are not held back


def test_the_cap_is_held_in_one_place_for_every_host(host: Host) -> None:
    """Three admissions from alternating hosts fill a cap of 3 and the fourth is refused, seeing the
    three; a retried admission is admitted again; only the admitted run's own release frees its place,
    for either host; a reused id's new run takes its earlier run's place. (Admission's clean-up of
    ended tasks asks Temporal; it is the same code on both backends and is tested with real tasks.)"""
    caps = {"acme": 3}
    a, b = (build_admission(h.model_copy(update={"tenant_caps": caps}), None) for h in (host("a"), host("b")))  # type: ignore[arg-type]
    got = [
        a._try_admit("t1", "acme", 3, "c1"),
        b._try_admit("t2", "acme", 3, "c2"),
        a._try_admit("t3", "acme", 3, "c3"),
    ]
    assert [g[0] for g in got] == [True, True, True]
    admitted, running, others = b._try_admit("t4", "acme", 3, "c4")
    assert (admitted, running) == (False, 3) and sorted(others) == [("t1", "c1"), ("t2", "c2"), ("t3", "c3")]
    assert b._try_admit("t1", "acme", 3, "c1")[0]  # a retried attempt of an admitted task
    b.release("t2", "other-chain")  # another run's release frees nothing
    assert not a._try_admit("t4", "acme", 3, "c4")[0]
    b.release("t2", "c2")
    assert a._try_admit("t4", "acme", 3, "c4")[:2] == (True, 3)
    # A reused task id (a new chain) takes the earlier run's place under its own tenant's cap.
    assert b._try_admit("t1", "acme", 3, "c1-again")[:2] == (True, 3)


def test_a_revocation_on_one_host_blocks_on_every_host_until_granted(host: Host) -> None:
    """Allowed unless revoked; a revocation for one tool blocks that tool only, one for every tool
    blocks all, with the reason; granting lifts it (and says whether there was one)."""
    a, b = build_authorizer(host("a")), build_authorizer(host("b"))
    request = AuthzRequest(
        task_id="t", tenant="acme", principal="lead", tool="submit_report", version="v", effect="write"
    )
    other = request.model_copy(update={"tool": "other_tool"})
    assert b.check(request).allowed
    a.revoke("lead", "submit_report", reason="left the team")  # type: ignore[attr-defined]
    denied = b.check(request)
    assert not denied.allowed and "submit_report" in denied.reason and "left the team" in denied.reason
    assert b.check(other).allowed
    a.revoke("lead", reason="suspended")  # type: ignore[attr-defined]
    assert not b.check(other).allowed and "every tool" in b.check(other).reason
    assert b.grant("lead") and not b.grant("lead")  # type: ignore[attr-defined]
    assert b.grant("lead", "submit_report")  # type: ignore[attr-defined]
    assert b.check(request).allowed and b.check(other).allowed


def test_events_are_stored_once_in_order_per_run_chain_whichever_host_publishes(host: Host) -> None:
    """A retried delivery from another host stores only the events not yet held; a reused id's new
    run chain starts again at 1; read gives every run's events in order, read_chain one run's."""
    a, b = build_event_sink(host("a")), build_event_sink(host("b"))
    assert a.publish("task-1", [_event("task-1", "c1", s) for s in (1, 2, 3)]) == 3
    assert b.publish("task-1", [_event("task-1", "c1", s) for s in (2, 3, 4, 5)]) == 2
    assert b.publish("task-1", [_event("task-1", "c1", s) for s in (4, 5)]) == 0
    assert a.publish("task-1", [_event("task-1", "c2", s) for s in (1, 2)]) == 2
    assert a.publish("task-2", [_event("task-2", None, 1)]) == 1
    read = b.read  # type: ignore[attr-defined]
    chain = b.read_chain  # type: ignore[attr-defined]
    assert [(e.run_chain, e.seq) for e in read("task-1")] == [("c1", s) for s in range(1, 6)] + [
        ("c2", 1),
        ("c2", 2),
    ]
    assert [e.seq for e in chain("task-1", "c2")] == [1, 2]
    assert [e.event_id for e in chain("task-2", None)] == ["task-2/None/1"]
    assert list(read("task-3")) == [] and list(chain("task-1", "c9")) == []


def test_a_local_delivery_replaces_a_lost_attempt_s_events_and_a_late_one_changes_nothing(host: Host) -> None:
    """A workflow task that delivered locally, then never committed, is retried with more history (a
    higher basis) and numbers its events otherwise: the sink replaces what the lost attempt delivered
    from the delivery's first seq on, including an event the retry no longer has; the lost attempt's
    local activity arriving late, or a committed delivery held, keeps a lower basis from replacing
    anything; the same attempt retried stores nothing twice. Other run chains are left alone."""
    sink, other = build_event_sink(host("a")), build_event_sink(host("b"))

    def attempt(seqs: range, name: str, chain: str = "c1") -> list[Event]:
        return [_event("task-1", chain, s).model_copy(update={"data": {"attempt": name}}) for s in seqs]

    def held(chain: str = "c1") -> list[tuple[int, str]]:
        return [(e.seq, e.data["attempt"]) for e in other.read_chain("task-1", chain)]  # type: ignore[attr-defined]

    basis = delivery_basis(0, 40)
    assert sink.publish_from("task-1", attempt(range(1, 4), "first"), basis) == (3, 0)  # type: ignore[attr-defined]
    assert sink.publish_from("task-1", attempt(range(4, 9), "lost"), basis + 10) == (5, 0)  # type: ignore[attr-defined]
    assert other.publish_from("task-1", attempt(range(1, 3), "c2", "c2"), basis) == (2, 0)  # type: ignore[attr-defined]
    # The retry (more history) has one event fewer from seq 4 on: 4..7 replaced, 8 gone.
    assert other.publish_from("task-1", attempt(range(4, 8), "retry"), basis + 14) == (4, 5)  # type: ignore[attr-defined]
    assert held() == [(1, "first"), (2, "first"), (3, "first")] + [(s, "retry") for s in range(4, 8)]
    # The lost attempt's local activity, retried late: nothing.
    assert sink.publish_from("task-1", attempt(range(4, 9), "lost"), basis + 10) == (0, 0)  # type: ignore[attr-defined]
    # The committed attempt's local activity retried: only what it had not stored yet.
    assert sink.publish_from("task-1", attempt(range(6, 10), "retry"), basis + 14) == (2, 0)  # type: ignore[attr-defined]
    # The next run of the chain (run index 1) goes on after it; a committed delivery is never replaced.
    assert sink.publish_from("task-1", attempt(range(10, 12), "run 2"), delivery_basis(1, 5)) == (2, 0)  # type: ignore[attr-defined]
    assert sink.publish("task-1", attempt(range(12, 13), "committed")) == 1
    assert sink.publish_from("task-1", attempt(range(12, 14), "lower"), delivery_basis(1, 9)) == (0, 0)  # type: ignore[attr-defined]
    assert [s for s, _ in held()] == list(range(1, 13)) and held()[-1] == (12, "committed")
    assert held("c2") == [(1, "c2"), (2, "c2")]
    assert plan_replace({4: 40, 5: 40}, 41) == (True, {4, 5}) and plan_replace({4: None}, 99) == (
        False,
        set(),
    )


def test_a_worker_whose_state_database_is_down_refuses_to_start_naming_the_store(
    dev_server: DevServer, tmp_path: Path
) -> None:
    """`agent-worker worker` with state_backend=postgres and nothing listening at the DSN exits
    non-zero, naming the state stores, the database and the command to run."""
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TEMPORAL_ADDRESS": dev_server.address,
        "AGENT_WORKER_TASK_QUEUE": f"tq-{uuid.uuid4().hex[:8]}",
        "AGENT_WORKER_DATA_DIR": str(tmp_path / "data"),
        "AGENT_WORKER_AGENTS": "agent_worker.examples.monthly_report.agent:registration",
        "AGENT_WORKER_STATE_BACKEND": "postgres",
        "AGENT_WORKER_STATE_DSN": f"host=127.0.0.1 port={port} dbname=nowhere connect_timeout=2",
    }
    done = subprocess.run(
        [sys.executable, "-m", "agent_worker.cli.main", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "state stores" in done.stderr and "event sink" in done.stderr, done.stderr
    assert f"127.0.0.1:{port}/nowhere" in done.stderr and "agent-worker migrate" in done.stderr


async def test_a_task_on_the_postgres_state_backend_has_its_events_read_by_the_cli_from_the_database(
    client: Client,
    dev_server: DevServer,
    postgres: PostgresServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A worker on state_backend=postgres (migrations applied by `agent-worker migrate`) runs a task
    to completion; its events are in the database, not in the worker's data dir, and `agent-worker
    events` run with another data dir reads the whole stream from there."""
    dsn = _fresh_database(postgres)
    config = make_config(tmp_path / "worker-data", state_backend="postgres", state_dsn=dsn)
    monkeypatch.setenv("AGENT_WORKER_STATE_BACKEND", "postgres")
    monkeypatch.setenv("AGENT_WORKER_STATE_DSN", dsn)
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(tmp_path / "cli-data"))
    code, out, err = await run_cli(capsys, "migrate")
    assert code == 0 and "applied migrations 1" in out, err
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    try:
        async with running_worker(client, config):
            handle = await env.start({"agent": "shell", "prompt": "run: echo hi"})
            await asyncio.wait_for(handle.result(), 60)
        code, out, err = await run_cli(capsys, "--address", dev_server.address, "events", handle.id, "--json")
    finally:
        postgres_db.close_pools()
    assert code == 0, err
    seqs = [Event.model_validate_json(line).seq for line in out.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 3
    assert not config.events_dir.exists() or not any(config.events_dir.iterdir())
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM agent_worker_events WHERE task_id = %s", (handle.id,)
        ).fetchone()
    assert row is not None and row[0] == len(seqs)


async def test_a_flood_tenant_gets_exactly_its_cap_running_on_two_workers_with_separate_data_dirs(
    client: Client, dev_server: DevServer, postgres: PostgresServer, tmp_path: Path
) -> None:
    """Two workers on one task queue, each with its own data dir (two hosts), share one state
    database: of 12 simultaneous long tasks of a tenant capped at 3, exactly 3 run and 9 end
    ``rejected`` naming the cap, whichever worker admitted them."""
    dsn = _fresh_database(postgres)
    first = make_config(
        tmp_path / "host-a", state_backend="postgres", state_dsn=dsn, tenant_caps={"flood": 3}
    )
    second = first.model_copy(update={"data_dir": tmp_path / "host-b"})
    migrate_state(first)
    env = TaskEnv(client=client, config=first, address=dev_server.address)
    spec = {"agent": "shell", "prompt": "run: sleep 60", "tenant": "flood"}
    try:
        # Another connection stands for the other host (one client runs one worker per queue).
        other_host = await connect(dev_server.address)
        async with running_worker(client, first), running_worker(other_host, second):
            flood = list(await asyncio.gather(*(env.start(spec) for _ in range(12))))
            statuses = await asyncio.gather(
                *(env.wait_status(h, lambda s: s.phase is not TaskPhase.RECEIVED) for h in flood)
            )
            admitted = [h for h, s in zip(flood, statuses, strict=True) if s.phase is not TaskPhase.REJECTED]
            refused = [s for s in statuses if s.phase is TaskPhase.REJECTED]
            await asyncio.gather(*(env.cancel(h) for h in admitted))
    finally:
        postgres_db.close_pools()
    assert len(admitted) == 3 and len(refused) == 9
    assert all(
        s.reason == "refused at start: tenant 'flood' already runs 3 tasks, its cap is 3" for s in refused
    )


async def test_a_state_database_outage_while_a_task_waits_is_retried_and_loses_nothing(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """The state database stops while a task waits for approval; the approval's next activities fail
    as state_unavailable and Temporal retries them; once the database is back the task completes
    with one write and its whole event stream stored once, in order."""
    server = start_postgres()  # its own: this test stops it
    try:
        config = make_config(tmp_path / "data", state_backend="postgres", state_dsn=server.dsn)
        migrate_state(config)
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        async with running_worker(client, config):
            handle = await env.start(example_spec())
            await env.awaiting_approval(handle)
            await asyncio.to_thread(server.stop)
            await env.approve(handle)
            failure = await _retried_failure(handle)
            await asyncio.to_thread(server.start)
            result = await asyncio.wait_for(handle.result(), 120)
        assert "state_unavailable" in failure or "state database" in failure, failure
        assert result.phase is TaskPhase.COMPLETED
        assert env.business().count() == 1
        stored = list(build_event_sink(config).read(handle.id))  # type: ignore[attr-defined]
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1)) and len(stored) > 5
    finally:
        postgres_db.close_pools()
        server.close()


async def _retried_failure(handle: WorkflowHandle[Any, Any], within: float = 60) -> str:
    """The last failure of a pending activity retried at least once (the outage seen by Temporal)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            if pending.attempt >= 2 and pending.last_failure.message:
                return f"{pending.activity_type.name}: {pending.last_failure.message}"
        assert asyncio.get_running_loop().time() < deadline, "no activity was retried during the outage"
        await asyncio.sleep(0.2)


async def test_a_turn_killed_on_one_host_is_answered_from_the_shared_journal_on_another(
    config_env: TaskEnv, postgres: PostgresServer, tmp_path: Path
) -> None:
    """Two worker processes with separate data dirs share one PostgreSQL (state and artifacts): the
    first is SIGKILLed while a turn makes its model calls; the second, on another data dir, answers
    the completed calls from the shared journal, so at most the call in flight is made twice."""
    dsn = _fresh_database(postgres)
    shared = {"state_backend": "postgres", "state_dsn": SecretStr(dsn), "artifact_backend": "postgres"}
    host_a = TaskEnv(
        client=config_env.client,
        config=config_env.config.model_copy(update={**shared, "data_dir": tmp_path / "host-a"}),
        address=config_env.address,
    )
    host_b = TaskEnv(
        client=config_env.client,
        config=host_a.config.model_copy(update={"data_dir": tmp_path / "host-b"}),
        address=config_env.address,
    )
    call_log = tmp_path / "calls.log"
    first = spawn_worker(host_a, tmp_path / "worker-a.log", **{CALL_LOG_ENV: str(call_log)})
    try:
        handle = await host_a.start({"agent": "notes", "prompt": "take your notes"})
        deadline = time.monotonic() + 60
        while not call_log.exists() or len(call_log.read_text().split()) < 3:
            assert time.monotonic() < deadline, "the turn never got going"
            await asyncio.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
    finally:
        if first.poll() is None:
            first.kill()
    calls_before_kill = len(call_log.read_text().split())
    second = spawn_worker(host_b, tmp_path / "worker-b.log", **{CALL_LOG_ENV: str(call_log)})
    try:
        result = await asyncio.wait_for(handle.result(), 120)
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
        postgres_db.close_pools()
    assert result.phase is TaskPhase.COMPLETED and result.final_output == "took 6 notes"
    calls = Counter(call_log.read_text().split())
    assert sorted(calls) == [str(i) for i in range(7)], calls
    assert sum(n - 1 for n in calls.values()) <= 1
    assert result.usage.replayed_model_calls >= calls_before_kill - 1 >= 2
    assert not (tmp_path / "host-a" / "journal").exists() and not (tmp_path / "host-b" / "journal").exists()
