"""Test support: a real Temporal dev server, workers on their own task queues, and helpers to drive
tasks. Used by ``conftest.py`` and the tests; ``assert_replays`` also records histories for
``make histories``."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.business import SqliteBusinessStore
from agent_worker.activities.stores.artifacts import build_artifact_store
from agent_worker.cli.devserver import free_port, start_dev_server, stop_process_group
from agent_worker.examples import EXAMPLES
from agent_worker.schemas import visibility
from agent_worker.schemas.approvals import ApprovalRequest
from agent_worker.schemas.config import EXAMPLE_AGENT, WorkerConfig
from agent_worker.schemas.payloads import DATA_CONVERTER
from agent_worker.schemas.tasks import CURRENT_RELEASE, TaskPhase, TaskResult, TaskStatus
from agent_worker.workflows import (
    AgentTaskWorkflow,
    FleetDoctorWorkflow,
    SandboxReaperWorkflow,
    ShadowRunWorkflow,
    ShadowTaskWorkflow,
)
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from agent_worker.client import WORKFLOW_TASK_TIMEOUT
from agent_worker.worker import build_workers, workflow_runner

# Every workflow the worker runs: a committed history of any of them replays against these.
WORKFLOWS = [
    AgentTaskWorkflow,
    SandboxReaperWorkflow,
    FleetDoctorWorkflow,
    ShadowRunWorkflow,
    ShadowTaskWorkflow,
]

REPO = Path(__file__).resolve().parents[2]
TEST_AGENTS = [EXAMPLE_AGENT, "tests.helpers.agents:registrations"]
HISTORY_IDS = "workflow_ids.json"


@dataclass
class DevServer:
    """A dev server started for the tests."""

    address: str
    proc: subprocess.Popen[bytes]
    db: Path

    def stop(self) -> None:
        stop_process_group(self.proc)


def launch_dev_server(
    directory: Path, dynamic_config: dict[str, str] | None = None, port: int | None = None
) -> DevServer:
    """Start the embedded dev server (WAL, search attributes) under ``directory``, on ``port`` or a
    free one (the same directory and port restart a server on its database)."""
    port = port or free_port()
    db = directory / "temporal.db"
    proc = start_dev_server(
        port=port,
        db_filename=db,
        log_file=directory / "temporal.log",
        headless=True,
        dynamic_config=dynamic_config,
    )
    return DevServer(address=f"127.0.0.1:{port}", proc=proc, db=db)


async def connect(address: str) -> Client:
    deadline = time.monotonic() + 30
    while True:
        try:
            client = await Client.connect(address, data_converter=DATA_CONVERTER)
            await client.count_workflows()
            return client
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


def example_spec(name: str = "monthly-report") -> dict[str, Any]:
    """A bundled example's TaskSpec, as the JSON any client would send."""
    return json.loads(EXAMPLES[name].read_text())


@dataclass
class TaskEnv:
    """One test's world: a client, a worker config with its own task queue and data dir."""

    client: Client
    config: WorkerConfig
    address: str

    @property
    def task_queue(self) -> str:
        return self.config.task_queue

    def business(self) -> SqliteBusinessStore:
        return SqliteBusinessStore(self.config.business_db)

    def store(self) -> ArtifactStore:
        return build_artifact_store(self.config)

    def worker_env(self) -> dict[str, str]:
        """Environment for a worker subprocess serving this env (the same configuration)."""
        config = self.config
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": self.address,
            "AGENT_WORKER_TASK_QUEUE": self.task_queue,
            "AGENT_WORKER_DATA_DIR": str(config.data_dir),
            "AGENT_WORKER_AGENTS": ",".join(config.agents),
            "AGENT_WORKER_MODEL_PROVIDER": "scripted",
            "AGENT_WORKER_SANDBOX_BACKEND": config.sandbox_backend,
            "AGENT_WORKER_BUSINESS_BACKEND": config.business_backend,
            "PYTHONPATH": str(REPO),
        }
        if config.business_dsn is not None:
            env["AGENT_WORKER_BUSINESS_DSN"] = config.business_dsn.get_secret_value()
        if config.business_url:
            env["AGENT_WORKER_BUSINESS_URL"] = config.business_url
        if config.business_writer:
            env["AGENT_WORKER_BUSINESS_WRITER"] = config.business_writer
        env["AGENT_WORKER_ARTIFACT_BACKEND"] = config.artifact_backend
        for field in ("artifact_bucket", "artifact_prefix", "artifact_endpoint_url", "artifact_region"):
            if getattr(config, field):
                env[f"AGENT_WORKER_{field.upper()}"] = getattr(config, field)
        if config.artifact_dsn is not None:
            env["AGENT_WORKER_ARTIFACT_DSN"] = config.artifact_dsn.get_secret_value()
        env["AGENT_WORKER_STATE_BACKEND"] = config.state_backend
        if config.state_dsn is not None:
            env["AGENT_WORKER_STATE_DSN"] = config.state_dsn.get_secret_value()
        return env

    async def start(
        self, spec: Any, task_id: str | None = None, *, release: str | None = CURRENT_RELEASE
    ) -> WorkflowHandle[Any, TaskResult]:
        """Start a task from a raw ``spec`` (a TaskSpec or ``{"spec": ...}`` object, or anything a
        test sends as bad input), on ``release`` as ``AgentWorkerClient.start`` does (None: the input
        names no release, as a raw JSON start's, so the task runs as on 0.1)."""
        if isinstance(spec, dict) and release is not None:
            spec = {**spec, "release": release} if "spec" in spec else {"spec": spec, "release": release}
        return await self.client.start_workflow(
            AgentTaskWorkflow.run,
            spec,
            id=task_id or f"t-{uuid.uuid4().hex[:10]}",
            task_queue=self.task_queue,
            result_type=TaskResult,
            task_timeout=WORKFLOW_TASK_TIMEOUT,  # as AgentWorkerClient.start
        )

    async def wait_status(
        self,
        handle: WorkflowHandle[Any, Any],
        until: Callable[[TaskStatus], bool],
        within: float = 60.0,
    ) -> TaskStatus:
        """Poll the ``status`` query until ``until`` holds."""
        deadline = time.monotonic() + within
        while True:
            try:
                status = await handle.query(AgentTaskWorkflow.status)
            except RPCError as err:
                # A query no worker answered in time (a loaded machine, a worker starting): ask again.
                if err.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
                    raise
                assert time.monotonic() < deadline, f"task {handle.id}: status query kept failing: {err}"
                await asyncio.sleep(0.5)
                continue
            if until(status):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"task {handle.id} never reached the condition; last status: {status}")
            await asyncio.sleep(0.1)

    async def parked(self, handle: WorkflowHandle[Any, Any], within: float = 60.0) -> None:
        """Wait until the task's search attributes say it waits for an approval, asking the server
        only (``describe``): unlike a query, this adds no workflow task to the task's history, so a
        history recorded this way holds the task's own round trips."""
        deadline = time.monotonic() + within
        while not (await handle.describe()).typed_search_attributes.get(visibility.AWAITING_APPROVAL):
            assert time.monotonic() < deadline, f"task {handle.id} never waited for an approval"
            await asyncio.sleep(0.1)

    async def awaiting_approval(self, handle: WorkflowHandle[Any, Any]) -> TaskStatus:
        return await self.wait_status(
            handle, lambda s: s.phase is TaskPhase.AWAITING_APPROVAL and bool(s.pending)
        )

    async def approve(self, handle: WorkflowHandle[Any, Any], principal: str = "finance-lead") -> None:
        """Wait for the task's one pending request and approve it through the ``decide`` update."""
        [request] = (await self.awaiting_approval(handle)).pending
        outcome = await handle.execute_update(
            AgentTaskWorkflow.decide,
            {
                "request_id": request.request_id,
                "version": request.version,
                "decision": "approve",
                "principal": principal,
            },
        )
        assert outcome.accepted is True

    async def cancel(self, handle: WorkflowHandle[Any, Any]) -> None:
        """Cancel the task and wait until it has closed (while this env's worker still runs)."""
        await handle.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.result(), 30)


def make_config(data_dir: Path, **overrides: Any) -> WorkerConfig:
    values: dict[str, Any] = {
        "task_queue": f"tq-{uuid.uuid4().hex[:10]}",
        "data_dir": data_dir,
        "agents": TEST_AGENTS,
        "model_provider": "scripted",
        "process_isolation": "auto",
        # Fast and inspectable on disk; the Docker tests choose docker (or auto) themselves.
        "sandbox_backend": "process",
    }
    values.update(overrides)
    return WorkerConfig(**values)


@contextlib.asynccontextmanager
async def running_worker(client: Client, config: WorkerConfig) -> AsyncIterator[None]:
    """In-process workers on ``config.task_queue`` (and its ``.business`` queue) for the block."""
    async with contextlib.AsyncExitStack() as running:
        for worker in build_workers(client, config):
            await running.enter_async_context(worker)
        yield


def spawn_worker(env: TaskEnv, log: Path, **extra_env: str) -> subprocess.Popen[bytes]:
    """A worker in its own process (``agent-worker worker``), for crash tests."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "agent_worker.cli.main", "worker"],
            env={**env.worker_env(), **extra_env},
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """Stop a worker process the way an operator does (SIGTERM, then SIGKILL after 30 s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def worker_process(env: TaskEnv, log: Path, **extra_env: str) -> AsyncIterator[subprocess.Popen[bytes]]:
    """A worker process (``spawn_worker``) for the block, stopped at its end if still running
    (its ``returncode`` is there afterwards)."""
    proc = spawn_worker(env, log, **extra_env)
    try:
        yield proc
    finally:
        await asyncio.to_thread(stop_worker, proc)


async def sigkill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker process (as a host loss does) and wait until it is gone."""
    os.kill(proc.pid, signal.SIGKILL)
    assert await asyncio.to_thread(proc.wait, 10) == -signal.SIGKILL


async def until(predicate: Callable[[], Any], within: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that. It runs in a thread (it
    may block: docker, files); when it returns an awaitable (an async check), that is awaited here."""
    deadline = time.monotonic() + within
    while True:
        value = await asyncio.to_thread(predicate)
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def decision(request: ApprovalRequest, kind: str, principal: str, **fields: Any) -> dict[str, Any]:
    """A decision on ``request`` as any client sends it (``submit_decision`` or ``decide``), plain
    JSON; ``fields``: ``edited_args``, ``reason``, ``signature``."""
    return {
        "request_id": request.request_id,
        "version": request.version,
        "decision": kind,
        "principal": principal,
        **fields,
    }


async def run_ids(client: Client, workflow_id: str) -> list[str]:
    """The run ids of a task (one per continue-as-new, plus the first), oldest first."""
    runs = [r async for r in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    return [r.run_id for r in sorted(runs, key=lambda r: r.start_time)]


async def task_chain(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """The history of every run of a task's chain, oldest run first (a task that waited for a person
    continued as new as the wait began: ``fetch_history`` alone reads its newest run)."""
    from agent_worker.activities.task_history import chain_of

    return await chain_of(client, await client.get_workflow_handle(workflow_id).fetch_history())


async def task_events(client: Client, workflow_id: str) -> list[Any]:
    """The history events of every run of a task's chain, oldest run first (``task_chain``)."""
    return [event for history in await task_chain(client, workflow_id) for event in history.events]


async def assert_replays(
    client: Client, workflow_id: str, run_id: str | None = None, *, keep: bool = True
) -> str:
    """Replay the task's history against the current code: every run of its chain (a task that
    waited for a person continued as new as the wait began), or only ``run_id``. Returns the
    history as JSON, the runs joined as one (``joined_runs``).

    With ``AW_RECORD_HISTORIES=DIR`` set, the runs replayed are also saved there, one file a run
    (``make histories`` refreshes ``tests/histories/`` this way), unless ``keep`` is False (a
    history too large to commit): the newest under the test function's name, each earlier one as
    ``NAME.runN`` (N counting from the oldest), so the code before a wait stays covered when the
    task waited in a short run. The parametrization is left out of the name, so that each file
    maps to a listed test function: a parametrized test (or one running several tasks) keeps the
    last history it replayed.
    """
    if run_id:
        runs = [await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()]
    else:
        runs = await task_chain(client, workflow_id)
    newest = runs[-1]
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER, workflow_runner=workflow_runner())
    for history in runs:
        await replayer.replay_workflow(history)
    record_dir = os.environ.get("AW_RECORD_HISTORIES")
    if record_dir and keep:
        # "tests/test_x.py::test_y[param-id] (call)" -> "test_y"; an id may hold "/" or spaces.
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
        test_name = node.split("[", 1)[0].split("::")[-1]
        Path(record_dir).mkdir(parents=True, exist_ok=True)
        # Child ids derive from the workflow id, so a replay needs the real one.
        index = Path(record_dir) / HISTORY_IDS
        ids = json.loads(index.read_text()) if index.exists() else {}
        for stale in Path(record_dir).glob(f"{test_name}.run*.json"):  # a chain it recorded before
            stale.unlink()
            ids.pop(stale.stem, None)
        for number, history in enumerate(runs, start=1):
            name = test_name if history is newest else f"{test_name}.run{number}"
            (Path(record_dir) / f"{name}.json").write_text(history.to_json())
            ids[name] = workflow_id
        index.write_text(json.dumps(ids, indent=2, sort_keys=True) + "\n")
    return joined_runs(runs)


def joined_runs(runs: list[WorkflowHistory]) -> str:
    """The runs of a chain (oldest first) as one history's JSON, for tests that read what a task
    did: their events in order, each run's event ids, and the ids its events refer to
    (``scheduledEventId``, ...), numbered on from the run before, so ids stay unique."""

    def numbered_on(value: Any, offset: int) -> Any:
        if isinstance(value, dict):
            return {
                key: str(int(item) + offset)
                if (key == "eventId" or key.endswith("EventId")) and isinstance(item, str | int)
                else numbered_on(item, offset)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [numbered_on(item, offset) for item in value]
        return value

    events: list[Any] = []
    for history in runs:
        events += numbered_on(json.loads(history.to_json())["events"], len(events))
    return json.dumps({"events": events})


async def replay_committed(
    path: Path, data_converter: DataConverter = pydantic_data_converter, *, sandboxed: bool = False
) -> None:
    """Replay a history committed under ``tests/histories/`` (with the workflow id it ran under,
    from the folder's ``HISTORY_IDS``: child ids derive from it) against the current code, in the
    worker's workflow runner (``sandboxed``: as ``workflow_sandbox`` on has it) and with
    ``data_converter``; fails naming the file on any nondeterminism."""
    ids = json.loads((path.parent / HISTORY_IDS).read_text())
    history = WorkflowHistory.from_json(ids[path.stem], json.loads(path.read_text()))
    runner = workflow_runner(sandboxed=sandboxed)
    replayer = Replayer(workflows=WORKFLOWS, data_converter=data_converter, workflow_runner=runner)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


async def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    """Run ``agent-worker`` with ``args`` in a thread (it runs its own event loop); ``capsys`` is
    pytest's fixture. Returns (exit code, stdout, stderr)."""
    from agent_worker.cli.main import main as cli_main

    code = await asyncio.to_thread(cli_main, list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def event_types(history_json: str) -> list[str]:
    """The event types of a history in JSON form."""
    return [e["eventType"] for e in json.loads(history_json)["events"]]
