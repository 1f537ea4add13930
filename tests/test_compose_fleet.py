"""The compose stack's fleet services, Redis and the HTTP API (issue 38, acceptance 6): checked as
``docker-compose config`` resolves them, then run here as processes with the environment and
commands the compose file gives them.

The fleet test runs what ``docker-compose up`` would, less the containers: two workers split by
role (one runs workflows, the other agent turns), ``agent-worker api`` behind its token, and Redis,
with the stores of the stack (PostgreSQL, S3-compatible storage) and the Temporal dev server. A
client starts a task and reads its live stream through the API while the turn runs on the other
worker: the model holds its answer after the first word until the reader has that word.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.streams import StreamEntry, assemble_text
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.client import Client

from tests.helpers.compose import healthcheck_argv, resolve, services, unescape
from tests.helpers.gated_model import GatedModel
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.redis_server import redis_server
from tests.helpers.support import REPO, DevServer, free_port, stop_worker, until
from tests.test_worker_roles import activity_workers

ANSWER = "Streams reach every reader through the API while the turn runs elsewhere."
TOKENS_FILE = "api-tokens.json"
# The compose network's names for the services, as the containers' environment spells them.
COMPOSE_HOSTS = ("temporal:7233", "redis://redis:", "host=postgresql", "object-store:")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The compose file as ``docker-compose config`` resolves it with every default."""
    return resolve({}, tmp_path_factory.mktemp("compose"))


# ---- the services, as resolved --------------------------------------------------------------------


def test_the_api_service_serves_the_http_api_behind_a_token_from_a_secret_file(
    config: dict[str, Any], tmp_path: Path
) -> None:
    """`api` runs `agent-worker api` in token mode, its tokens read from a compose secret (a file
    beside the compose file by default, or AGENT_WORKER_API_TOKENS_FILE); no token is in the compose
    file, its environment or its command, and the default tokens file is neither committed nor
    sent to an image build."""
    api = services(config)["api"]
    assert api["command"][0] == "api"
    assert {"--auth=token", "--tokens=/run/secrets/api-tokens", "--bind=0.0.0.0:8091"} <= set(api["command"])
    assert api["secrets"] == [{"source": "api-tokens"}]
    assert Path(config["secrets"]["api-tokens"]["file"]) == REPO / TOKENS_FILE
    elsewhere = resolve({"AGENT_WORKER_API_TOKENS_FILE": "/etc/agent-worker/tokens.json"}, tmp_path)
    assert elsewhere["secrets"]["api-tokens"]["file"] == "/etc/agent-worker/tokens.json"
    assert not [name for name in api["environment"] if "TOKEN" in name]
    assert not [arg for arg in api["command"] if "bearer" in arg.lower() or arg.startswith("--token=")]
    for ignore_file in (".gitignore", ".dockerignore"):
        assert TOKENS_FILE in (REPO / ignore_file).read_text().split(), ignore_file


def test_the_workers_and_the_api_share_the_stream_and_state_stores(config: dict[str, Any]) -> None:
    """The workers write live streams to the stack's Redis and events to its PostgreSQL, and the
    API reads both from the same places: its environment is a valid config with the workers'
    stream backend, stream URL and state store, and it starts tasks on the workers' queue."""
    svc = services(config)
    worker = WorkerConfig.from_env({k: unescape(str(v)) for k, v in svc["worker"]["environment"].items()})
    api = WorkerConfig.from_env({k: unescape(str(v)) for k, v in svc["api"]["environment"].items()})
    assert worker.stream_backend == api.stream_backend == "redis"
    assert worker.stream_url is not None and api.stream_url is not None
    assert worker.stream_url.get_secret_value() == api.stream_url.get_secret_value() == "redis://redis:6379/0"
    assert worker.state_backend == api.state_backend == "postgres"
    assert worker.state_dsn == api.state_dsn
    assert f"--task-queue={worker.task_queue}" in svc["api"]["command"]
    # Redis is reachable on the stack's network only, and keeps its data on its own volume.
    redis = svc["redis"]
    assert "ports" not in redis and redis["command"][:1] == ["redis-server"]


def test_the_redis_health_check_passes_on_a_live_server_only(config: dict[str, Any], tmp_path: Path) -> None:
    """Redis's check (the image's redis-cli) passes against a running server and fails against a
    port where none listens."""
    [kind, command] = services(config)["redis"]["healthcheck"]["test"]
    assert kind == "CMD-SHELL" and "-p 6379" in command
    outcomes = {}
    with redis_server(tmp_path) as url:
        for live, port in ((True, url.rsplit(":", 1)[1].split("/")[0]), (False, str(free_port()))):
            ran = subprocess.run(["/bin/sh", "-c", command.replace("-p 6379", f"-p {port}")], timeout=30)
            outcomes[live] = ran.returncode
    assert outcomes[True] == 0 and outcomes[False] != 0


# ---- the fleet, as processes ----------------------------------------------------------------------


class Fleet:
    """The compose services' environments and commands, pointed at the servers of this machine."""

    def __init__(
        self, dev: DevServer, redis_url: str, postgres: PostgresServer, s3: str, root: Path, model: GatedModel
    ) -> None:
        self.root = root
        self.database = f"fleet_{uuid.uuid4().hex[:8]}"
        self.hosts = {
            "temporal:7233": dev.address,
            "redis://redis:6379/0": redis_url,
            "host=postgresql port=5432 dbname=agent_worker": (
                f"host=127.0.0.1 port={postgres.port} dbname={self.database}"
            ),
            "http://object-store:9000": s3,
        }
        self.pg_port = postgres.port
        # What a team sets on the host for `docker-compose up`: our agents, the model, a queue.
        self.host_env = {
            "AGENT_WORKER_AGENTS": "tests.helpers.agents:registrations",
            "AGENT_WORKER_TASK_QUEUE": f"fleet-{uuid.uuid4().hex[:8]}",
            "AGENT_WORKER_ARTIFACT_BUCKET": f"fleet-{uuid.uuid4().hex[:8]}",
            "AGENT_WORKER_STATE_DB": self.database,
            "AGENT_WORKER_MODEL_PROVIDER": "openai",
            "OPENAI_API_KEY": "sk-test-not-real",
            "OPENAI_BASE_URL": model.base_url,
            "AGENT_WORKER_OPENAI_MODEL": "gpt-test",
        }

    def service(self, name: str, **host_env: str) -> dict[str, Any]:
        return services(resolve({**self.host_env, **host_env}, self.root))[name]

    def env(self, service: dict[str, Any], data_dir: Path | None = None) -> dict[str, str]:
        """The service's environment for a process here: every compose host replaced by its server
        here (none may be left), the data dir and the ports local."""
        env = {}
        for name, value in service["environment"].items():
            value = unescape(str(value))
            for compose_host, here in self.hosts.items():
                value = value.replace(compose_host, here)
            assert not any(host in value for host in COMPOSE_HOSTS), f"{name}={value}: not mapped"
            env[name] = value
        if data_dir is not None:
            env["AGENT_WORKER_DATA_DIR"] = str(data_dir)
        for bind in ("AGENT_WORKER_HEALTH_BIND", "AGENT_WORKER_METRICS_BIND"):
            if bind in env:
                env[bind] = f"127.0.0.1:{free_port()}"
        # The test's PostgreSQL trusts its superuser; the stack's has its own user and password.
        env |= {"PGUSER": "postgres", "PGHOST": "127.0.0.1", "PGPORT": str(self.pg_port)}
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "PYTHONPATH": str(REPO), **env}

    def spawn(self, argv: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        with (self.root / log).open("wb") as out:
            return subprocess.Popen(
                [sys.executable, *argv], env=env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT
            )


@contextlib.contextmanager
def stopped_at_exit(procs: list[subprocess.Popen[bytes]]) -> Iterator[None]:
    try:
        yield
    finally:
        for proc in procs:
            stop_worker(proc)


async def healthy(argv: list[str], proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the service's own health check passes against the process."""

    def passes() -> bool:
        assert proc.poll() is None, f"{log.name} exited: {log.read_text()[-3000:]}"
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0

    await until(passes, 90, f"the health check of {log.name}")


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event, data) of each Server-Sent Event frame of the response."""
    kind, data = "", ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
        elif not line and kind:
            yield kind, json.loads(data)
            kind, data = "", ""


async def test_two_workers_the_api_and_redis_stream_a_turn_running_on_the_other_worker(
    dev_server: DevServer, client: Client, postgres: PostgresServer, s3_endpoint: str, tmp_path: Path
) -> None:
    """The compose services as processes: stores set up by the stores-setup job's command, a
    workflows worker and an agent worker (AGENT_WORKER_ROLE), the API with a hashed token, Redis.
    Through the API a client starts a task and reads its live stream: the first word arrives while
    the model still holds the rest of its answer (the turn is running), then the rest and the end.
    The turn ran on the agent worker and the workflow on the other; the stream's entries of the
    turn were written by the agent worker; the API process ran nothing; the text read is the
    task's output."""
    token = secrets.token_urlsafe(24)
    (tmp_path / TOKENS_FILE).write_text(
        json.dumps({f"sha256:{hashlib.sha256(token.encode()).hexdigest()}": "alice"})
    )
    with redis_server(tmp_path) as redis_url, GatedModel(ANSWER) as model:
        fleet = Fleet(dev_server, redis_url, postgres, s3_endpoint, tmp_path, model)
        setup = fleet.service("stores-setup")
        provisioned = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, *setup["entrypoint"][1:]],
            env=fleet.env(setup),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert provisioned.returncode == 0, provisioned.stdout + provisioned.stderr

        control_svc = fleet.service("worker", AGENT_WORKER_ROLE="workflows")
        hands_svc = fleet.service("worker", AGENT_WORKER_ROLE="agent")
        api_svc = fleet.service("api")
        api_port = free_port()
        api_argv = [
            arg.replace("0.0.0.0:8091", f"127.0.0.1:{api_port}").replace(
                "/run/secrets/api-tokens", str(tmp_path / TOKENS_FILE)
            )
            for arg in api_svc["command"]
        ]
        envs = {
            "control": fleet.env(control_svc, tmp_path / "control-data"),
            "hands": fleet.env(hands_svc, tmp_path / "hands-data"),
            "api": fleet.env(api_svc),
        }
        control = fleet.spawn(
            ["-m", "agent_worker.cli.main", *control_svc["command"]], envs["control"], "control.log"
        )
        hands = fleet.spawn(
            ["-m", "agent_worker.cli.main", *hands_svc["command"]], envs["hands"], "hands.log"
        )
        api = fleet.spawn(["-m", "agent_worker.cli.main", *api_argv], envs["api"], "api.log")
        with stopped_at_exit([api, hands, control]):
            for name, proc, svc in (("control", control, control_svc), ("hands", hands, hands_svc)):
                port = int(envs[name]["AGENT_WORKER_HEALTH_BIND"].rsplit(":", 1)[1])
                await healthy(healthcheck_argv(svc, 8000, port), proc, tmp_path / f"{name}.log")
            await healthy(healthcheck_argv(api_svc, 8091, api_port), api, tmp_path / "api.log")

            base = f"http://127.0.0.1:{api_port}"
            auth = {"Authorization": f"Bearer {token}"}
            spec = {"agent": "plain", "prompt": "How do streams reach readers?"}
            spec["policy"] = {"default_approvers": ["alice"]}
            task_id = f"fleet-{uuid.uuid4().hex[:8]}"
            async with httpx.AsyncClient(base_url=base, headers=auth, timeout=120) as http:
                started = await http.post("/v1/tasks", json={"spec": spec, "task_id": task_id})
                assert started.status_code == 201, started.text
                task_id = started.json()["task_id"]  # the chosen id, scoped to the spec's tenant
                entries: list[StreamEntry] = []
                before_gate: list[StreamEntry] = []
                async with http.stream("GET", f"/v1/tasks/{task_id}/stream") as response:
                    assert response.status_code == 200
                    async for kind, data in sse(response):
                        if kind == "end":
                            break
                        entries.append(StreamEntry.model_validate(data))
                        if kind == "token" and not model.gate.is_set():
                            # The model holds the rest of its answer until this gate opens.
                            assert model.held.is_set()
                            before_gate = list(entries)
                            model.gate.set()
            result: TaskResult = await client.get_workflow_handle(task_id, result_type=TaskResult).result()
    # Read while the turn ran: the first word alone, the model holding the rest.
    assert assemble_text(before_gate) == ANSWER.split(" ")[0] + " "
    assert model.released and model.streamed == 1
    assert result.phase is TaskPhase.COMPLETED and result.final_output == ANSWER
    assert assemble_text(entries) == ANSWER
    assert [e.offset for e in entries] == list(range(1, len(entries) + 1))

    handle = client.get_workflow_handle(task_id)
    ran_by = await activity_workers(client, task_id)
    assert ran_by["agent.turn"] == {hands.pid}
    history = await handle.fetch_history()
    workflow_workers = {
        int(e.workflow_task_started_event_attributes.identity.split("@", 1)[0])
        for e in history.events
        if e.HasField("workflow_task_started_event_attributes")
    }
    assert workflow_workers == {control.pid}
    assert api.pid not in set().union(*ran_by.values()) | workflow_workers
    turn_entries = [e for e in entries if e.turn > 0]
    assert turn_entries and {e.writer.rsplit(":", 1)[1] for e in turn_entries} == {str(hands.pid)}
    assert str(api.pid) not in {e.writer.rsplit(":", 1)[1] for e in entries}
