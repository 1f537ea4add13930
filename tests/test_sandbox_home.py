"""A host-local sandbox (here the process tier) lives on the worker host that created it, so every
later operation on it goes to that host's home queue, ``<queue>.sandbox@<host id>``: two worker
processes with their own data dirs (two hosts) share one PostgreSQL (state, artifacts); the
sandbox is made on host A and A is SIGKILLed while the task waits for an approval."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_worker.activities.stores import postgres_db
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from agent_worker.workflows.options import home_queue
from pydantic import SecretStr
from temporalio.client import WorkflowHandle

from tests.helpers.home_agents import MARK
from tests.helpers.matrix import Record, record
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.support import TEST_AGENTS, TaskEnv, assert_replays, decision, spawn_worker

# Short, so that a host that stays away costs the test seconds (the default is a minute).
HOME_WAIT_SECONDS = 3
SPEC: dict[str, Any] = {
    "agent": "marker",
    "prompt": "leave a mark, then read it back",
    "policy": {"rules": [{"tool": "read_mark", "decision": "require_approval", "approvers": ["clerk"]}]},
}


@pytest.fixture
def hosts(config_env: TaskEnv, postgres: PostgresServer, tmp_path: Path) -> Iterator[tuple[TaskEnv, TaskEnv]]:
    """Hosts A and B: a data dir and a host id each, one fresh PostgreSQL database for both."""
    database = f"home_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    shared = {
        "state_backend": "postgres",
        "state_dsn": SecretStr(postgres.dsn_for(database)),
        "artifact_backend": "postgres",
        "agents": [*TEST_AGENTS, "tests.helpers.home_agents:registrations"],
        "sandbox_unsafe_dev": True,
    }
    a, b = (
        TaskEnv(
            client=config_env.client,
            config=config_env.config.model_copy(
                update={**shared, "data_dir": tmp_path / f"host-{name}", "host_id": f"host-{name}"}
            ),
            address=config_env.address,
        )
        for name in ("a", "b")
    )
    yield a, b
    postgres_db.close_pools()


class Fleet:
    """The worker processes a test starts (each a host's ``agent-worker worker``), by name."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    async def start(
        self, name: str, host: TaskEnv, home_wait: float | None = None
    ) -> subprocess.Popen[bytes]:
        """Start a worker for ``host``; its sandboxes record ``home_wait`` (None: the default)."""
        log = self.tmp_path / f"worker-{name}.log"
        wait = {} if home_wait is None else {"AGENT_WORKER_SANDBOX_HOME_WAIT_SECONDS": str(home_wait)}
        proc = spawn_worker(
            host, log, AGENT_WORKER_HOST_ID=host.config.host, AGENT_WORKER_SANDBOX_UNSAFE_DEV="true", **wait
        )
        self.procs[name] = proc
        deadline = time.monotonic() + 60
        while "worker started" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, f"worker {name} did not start"
            await asyncio.sleep(0.2)
        return proc

    async def kill(self, name: str) -> None:
        proc = self.procs[name]
        os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)

    async def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, 30)
            if proc.poll() is None:
                proc.kill()


@pytest.fixture
async def fleet(tmp_path: Path) -> Any:
    running = Fleet(tmp_path)
    try:
        yield running
    finally:
        await running.stop()


def sandboxes_on(host: TaskEnv) -> list[str]:
    """The process-tier sandboxes still in the host's data dir."""
    return sorted(p.parent.name for p in host.config.sandbox_root.glob("*/labels.json"))


def started_by(history_json: str) -> list[tuple[str, str]]:
    """(activity type, pid of the worker that ran its last attempt) of every sandbox activity, in
    the order they were scheduled."""
    events = json.loads(history_json)["events"]
    scheduled = {
        e["eventId"]: e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if "activityTaskScheduledEventAttributes" in e
    }
    return [
        (scheduled[a["scheduledEventId"]], a["identity"].split("@", 1)[0])
        for e in events
        if (a := e.get("activityTaskStartedEventAttributes"))
        and scheduled[a["scheduledEventId"]].startswith("sandbox.")
    ]


def exec_trips(history_json: str) -> list[tuple[str, str, str]]:
    """(task queue, pid of the worker that ran its last attempt or "", how it ended: ``completed``,
    the failure's error type, or ``open``) of every ``sandbox.exec``, in the order they were scheduled."""
    events = json.loads(history_json)["events"]
    trips: dict[str, list[str]] = {}
    for e in events:
        if (a := e.get("activityTaskScheduledEventAttributes")) and a["activityType"][
            "name"
        ] == "sandbox.exec":
            trips[e["eventId"]] = [a["taskQueue"]["name"], "", "open"]
        elif (a := e.get("activityTaskStartedEventAttributes")) and a["scheduledEventId"] in trips:
            trips[a["scheduledEventId"]][1] = a["identity"].split("@", 1)[0]
        elif (a := e.get("activityTaskCompletedEventAttributes")) and a["scheduledEventId"] in trips:
            trips[a["scheduledEventId"]][2] = "completed"
        elif (a := e.get("activityTaskFailedEventAttributes")) and a["scheduledEventId"] in trips:
            trips[a["scheduledEventId"]][2] = (
                a["failure"].get("applicationFailureInfo", {}).get("type", "failed")
            )
        elif (a := e.get("activityTaskTimedOutEventAttributes")) and a["scheduledEventId"] in trips:
            trips[a["scheduledEventId"]][2] = "timed out"
    return [(queue, pid, end) for queue, pid, end in trips.values()]


def local_trips(history_json: str, activity_type: str) -> list[str]:
    """How each local activity of ``activity_type`` ended, in order: ``completed`` or its error type."""
    ends = []
    for e in json.loads(history_json)["events"]:
        marker = e.get("markerRecordedEventAttributes")
        if not marker or marker["markerName"] != "core_local_activity":
            continue
        data = json.loads(base64.b64decode(marker["details"]["data"]["payloads"][0]["data"]))
        if data["activity_type"] == activity_type:
            failure = marker.get("failure")
            ends.append("completed" if failure is None else failure["applicationFailureInfo"]["type"])
    return ends


def scheduled_kinds(history_json: str) -> list[str]:
    """The sandbox activity types scheduled, in order (started or not)."""
    return [
        kind
        for e in json.loads(history_json)["events"]
        if (a := e.get("activityTaskScheduledEventAttributes"))
        and (kind := a["activityType"]["name"]).startswith("sandbox.")
    ]


async def sandbox_made_on_a_then_a_killed(
    a: TaskEnv, b: TaskEnv, fleet: Fleet, home_wait: float | None = HOME_WAIT_SECONDS
) -> tuple[Any, Any, subprocess.Popen[bytes]]:
    """Start the task with only A running (its sandbox, made with ``home_wait``, and first command
    are A's), bring B up, and SIGKILL A while the task waits for the second command's approval."""
    first_a = await fleet.start("a-1", a, home_wait)
    handle = await a.start(SPEC)
    status = await a.awaiting_approval(handle)
    assert sandboxes_on(a) and not sandboxes_on(b)
    await fleet.start("b", b)
    await fleet.kill("a-1")
    return handle, status, first_a


async def test_after_a_sigkill_and_restart_the_task_s_next_command_and_destroy_run_on_its_host(
    hosts: tuple[TaskEnv, TaskEnv], fleet: Fleet, record_property: Record
) -> None:
    """While A is down the second command waits on A's home queue: B, now running the task, is asked
    first (the local activity ``sandbox.exec_here``) and refuses it (``sandbox_elsewhere``: the
    sandbox is A's), and it goes to A's queue; A restarted on its data dir picks it up and finds the
    file the first command left. The third command goes to A's queue at once (B is not asked again),
    the destroy runs on A too, and nothing is left on either host."""
    a, b = hosts
    # The default home wait (a minute): long enough for a restart.
    handle, _, first_a = await sandbox_made_on_a_then_a_killed(a, b, fleet, home_wait=None)
    await a.approve(handle, principal="clerk")
    await asyncio.sleep(2)  # B would have taken a command on a shared queue by now
    description = await handle.describe()
    [waiting] = [p for p in description.raw_description.pending_activities]
    assert waiting.activity_type.name == "sandbox.exec" and waiting.attempt == 1
    assert waiting.last_worker_identity == ""  # not started anywhere
    second_a = await fleet.start("a-2", a)
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)

    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == f"read: {MARK}"
    assert result.evidence.missing == [] and result.evidence_complete
    write, read, check = result.evidence.commands
    assert write.sandbox_id == read.sandbox_id == check.sandbox_id and read.exit_code == check.exit_code == 0
    history = await assert_replays(a.client, handle.id)
    ran = started_by(history)
    # The first command made the sandbox (no separate place or create), on the task queue. B refused
    # the second here, which then ran on A's queue, as did the third without asking B again.
    a_home = home_queue(a.task_queue, a.config.host)
    assert exec_trips(history) == [
        (a.task_queue, str(first_a.pid), "completed"),
        (a_home, str(second_a.pid), "completed"),
        (a_home, str(second_a.pid), "completed"),
    ]
    assert local_trips(history, "sandbox.exec_here") == ["sandbox_elsewhere"]
    # The destroy ran on A: in a local activity when A ran that workflow task, else on A's queue.
    assert [pid for kind, pid in ran if kind == "sandbox.destroy"] in ([], [str(second_a.pid)])
    status = await handle.query(AgentTaskWorkflow.status)
    assert [e.type.value for e in status.last_events].count("sandbox.destroyed") == 1
    assert "sandbox.lost" not in history and sandboxes_on(a) == [] and sandboxes_on(b) == []
    record(
        record_property,
        observed="A killed, restarted: the second command and the destroy ran on A, file found",
        duplicates=0,
        lost=0,
        leftover=len(sandboxes_on(a)) + len(sandboxes_on(b)),
    )


async def test_on_the_host_that_runs_the_task_later_commands_run_in_its_workflow_task(
    hosts: tuple[TaskEnv, TaskEnv], fleet: Fleet, record_property: Record
) -> None:
    """With one host, which runs the task and holds its sandbox, the first command makes the sandbox
    in an activity on the task queue, and the two after it run as local activities
    (``sandbox.exec_here``): no activity on the home queue, no workflow task for their results."""
    a, _ = hosts
    worker = await fleet.start("a", a)
    handle = await a.start(SPEC)
    await a.awaiting_approval(handle)
    await a.approve(handle, principal="clerk")
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)

    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == f"read: {MARK}"
    assert [c.exit_code for c in result.evidence.commands] == [0, 0, 0]
    history = await assert_replays(a.client, handle.id)
    assert exec_trips(history) == [(a.task_queue, str(worker.pid), "completed")]
    assert local_trips(history, "sandbox.exec_here") == ["completed", "completed"]
    assert sandboxes_on(a) == []
    record(
        record_property,
        observed="one host: the first command an activity, the next two local activities",
        duplicates=0,
        lost=0,
        leftover=len(sandboxes_on(a)),
    )


async def test_a_worker_drained_during_a_command_it_runs_here_finishes_it_once(
    hosts: tuple[TaskEnv, TaskEnv], fleet: Fleet, record_property: Record
) -> None:
    """SIGTERM while the task's second command runs as a local activity on its one host: the
    worker's drain lets the command finish and its workflow task complete, and a worker restarted on
    the same host finishes the task; the command ran once (one start, one end in its files)."""
    a, _ = hosts
    await fleet.start("a-1", a)
    handle = await a.start({"agent": "lingerer", "prompt": "mark, then linger"})
    deadline = time.monotonic() + 60
    while not list(a.config.sandbox_root.glob("*/work/started.txt")):
        assert time.monotonic() < deadline, "the second command never started"
        await asyncio.sleep(0.1)
    fleet.procs["a-1"].send_signal(signal.SIGTERM)
    await asyncio.to_thread(fleet.procs["a-1"].wait, 60)
    await fleet.start("a-2", a)
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)

    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "lingered: start end", result.final_output
    history = await assert_replays(a.client, handle.id)
    assert local_trips(history, "sandbox.exec_here") == ["completed"]
    assert "sandbox.lost" not in history and sandboxes_on(a) == []
    record(
        record_property,
        observed="SIGTERM mid local command: drained, the command ran once, the task completed",
        duplicates=0,
        lost=0,
        leftover=len(sandboxes_on(a)),
    )


async def test_a_host_that_never_comes_back_loses_its_sandbox_and_the_task_completes_on_another(
    hosts: tuple[TaskEnv, TaskEnv], fleet: Fleet, record_property: Record
) -> None:
    """A is killed for good: once the command has waited its home wait on A's queue the sandbox
    counts as lost (event naming A), the task rebuilds it on B from its inputs and runs the command
    there (the file the first command made on A is gone), and B destroys its own sandbox; A's is left
    to A's reaper."""
    a, b = hosts
    handle, _, _ = await sandbox_made_on_a_then_a_killed(a, b, fleet)
    started = time.monotonic()
    await a.approve(handle, principal="clerk")
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)

    assert time.monotonic() - started >= HOME_WAIT_SECONDS
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output is not None and result.final_output.startswith("read failed:")
    assert "mark.txt" in result.final_output
    [lost] = [m for m in result.evidence.missing if m.startswith("sandbox ")]
    assert "after 1 command(s) (call_write)" in lost
    history = await assert_replays(a.client, handle.id)
    status = await handle.query(AgentTaskWorkflow.status)
    [lost_event] = [e for e in status.last_events if e.type.value == "sandbox.lost"]
    assert f"host {a.config.host}" in lost_event.data["error"], lost_event.data
    assert home_queue(a.task_queue, a.config.host) != home_queue(b.task_queue, b.config.host)
    # Each sandbox is made by its first command: one on A, the one after the loss on B. The second
    # command, refused here by B and sent to A's queue, never started there; B, the only worker left,
    # destroys its own sandbox in a local activity.
    a_pid, b_pid = str(fleet.procs["a-1"].pid), str(fleet.procs["b"].pid)
    assert exec_trips(history) == [
        (a.task_queue, a_pid, "completed"),
        (home_queue(a.task_queue, a.config.host), "", "timed out"),
        (a.task_queue, b_pid, "completed"),
    ]
    assert local_trips(history, "sandbox.exec_here") == ["sandbox_elsewhere"]
    assert [e.type.value for e in status.last_events].count("sandbox.destroyed") == 1
    assert sandboxes_on(b) == [] and len(sandboxes_on(a)) == 1
    record(
        record_property,
        observed=f"A gone: sandbox.lost after {HOME_WAIT_SECONDS} s, rebuilt on B; A's left to its reaper",
        duplicates=0,
        lost=0,
        leftover=len(sandboxes_on(b)),
    )


async def test_a_destroy_its_host_never_takes_leaves_the_sandbox_to_that_host_s_reaper(
    hosts: tuple[TaskEnv, TaskEnv], fleet: Fleet, record_property: Record
) -> None:
    """A is killed for good and the approver rejects the second command (the task ends rejected):
    the destroy waits its home wait on A's queue, then the task records the sandbox as left for
    A's reaper (event naming A) and ends as it would have; B never touches it."""
    a, b = hosts
    handle, status, _ = await sandbox_made_on_a_then_a_killed(a, b, fleet)
    [request] = status.pending
    await handle.execute_update(
        AgentTaskWorkflow.decide, decision(request, "reject", "clerk", reason="not now")
    )
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)

    assert result.phase in (TaskPhase.COMPLETED, TaskPhase.REJECTED), result.reason
    status = await handle.query(AgentTaskWorkflow.status)
    [left] = [e for e in status.last_events if e.type.value == "sandbox.left"]
    assert left.data["host"] == a.config.host and left.data["home_queue"] == home_queue(
        a.task_queue, "host-a"
    )
    assert not [e for e in status.last_events if e.type.value == "sandbox.destroyed"]
    history = await assert_replays(a.client, handle.id)
    # B refuses the destroy here (the sandbox is A's); the destroy sent to A's queue never starts.
    assert [kind for kind, _ in started_by(history)] == ["sandbox.exec"]
    assert "sandbox.destroy" in scheduled_kinds(history)
    assert len(sandboxes_on(a)) == 1 and sandboxes_on(b) == []
    record(
        record_property,
        observed=f"A gone: destroy not taken within {HOME_WAIT_SECONDS} s, sandbox.left naming A; task ended",
        duplicates=0,
        lost=0,
        leftover=0,
    )


async def heartbeat_names_home(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the pending ``sandbox.exec`` has a heartbeat on the server that names its home queue."""
    description = await handle.describe()
    return any(
        pending.activity_type.name == "sandbox.exec"
        and any(b"home_queue" in p.data for p in pending.heartbeat_details.payloads)
        for pending in description.raw_description.pending_activities
    )


async def test_a_first_command_retried_after_its_host_died_goes_back_to_that_host(
    hosts: tuple[TaskEnv, TaskEnv], fleet: Fleet, record_property: Record
) -> None:
    """The task's first command makes its sandbox on A; A is SIGKILLed while it runs. The retry, taken
    by B, finds from the lost attempt's heartbeat that the sandbox was begun on A and sends the command
    to A's home queue instead of making a second sandbox on B; A restarted runs it there. No sandbox
    is ever made on B, none is left on A."""
    a, b = hosts
    first_a = await fleet.start("a-1", a)
    # The first attempt outlives B's start on a busy box (a 6 s command once finished on A before A
    # was killed, and then nothing was retried); the retry, in the sandbox A began, finds the mark.
    script = "if [ -e begun ]; then echo done; else touch begun; sleep 30; fi"
    handle = await a.start({"agent": "shell", "prompt": f"run: {script}"})
    deadline = time.monotonic() + 60
    while not sandboxes_on(a):
        assert time.monotonic() < deadline, "the first command never made its sandbox"
        await asyncio.sleep(0.2)
    # The running command's heartbeat (naming the sandbox's home) has reached the server: the retry
    # learns of the sandbox from it. (A fixed sleep raced the SDK's heartbeat throttle on a busy box.)
    while not await heartbeat_names_home(handle):
        assert time.monotonic() < deadline, "the first command's heartbeat never reached the server"
        await asyncio.sleep(0.2)
    await fleet.start("b", b)
    await fleet.kill("a-1")
    running = [p.activity_type.name for p in (await handle.describe()).raw_description.pending_activities]
    assert running == ["sandbox.exec"], "the command ended before A was killed"
    # A stays down until B has taken the retry (after the heartbeat timeout) and sent it back: 10 s
    # alone; the bound is the one the result gets below.
    deadline = time.monotonic() + 120
    while "sandbox_begun_elsewhere" not in (await handle.fetch_history()).to_json():
        if time.monotonic() > deadline:
            pending = (await handle.describe()).raw_description.pending_activities
            log_b = (fleet.tmp_path / "worker-b.log").read_text()[-3000:]
            raise AssertionError(f"B never sent the retried command back to A: {pending}\n{log_b}")
        await asyncio.sleep(0.5)
    assert sandboxes_on(b) == []
    second_a = await fleet.start("a-2", a)
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)

    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert "done" in (result.final_output or "")
    history = await assert_replays(a.client, handle.id)
    # (the worker that ran an activity's last attempt) the first command's: B, which sent it back;
    # then the command on A's home queue: A restarted.
    ran = started_by(history)
    assert ran[:2] == [("sandbox.exec", str(fleet.procs["b"].pid)), ("sandbox.exec", str(second_a.pid))]
    assert first_a.pid != second_a.pid
    assert sandboxes_on(b) == [] and sandboxes_on(a) == []
    assert "sandbox.lost" not in history
    record(
        record_property,
        observed="A killed mid first command: the retry went back to A's queue; no second sandbox",
        duplicates=0,
        lost=0,
        leftover=len(sandboxes_on(a)) + len(sandboxes_on(b)),
    )
