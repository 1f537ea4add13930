"""docker-compose.temporal.yml, checked without pulling an image.

Images cannot be pulled here, so the compose file is checked as ``docker-compose config`` resolves
it (services, ports, environment, health checks, start order, scaling), and the parts that are
ours are run for real: the search-attribute script and Temporal's health check against the dev
server, the codec server's command, and the worker's and codec server's health checks.
(tests/test_dockerfile.py checks the image those two services are built from.)
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from agent_worker.cli.devserver import temporal_binary
from agent_worker.schemas import visibility
from agent_worker.schemas.config import WorkerConfig
from agent_worker.security.codec import new_key
from agent_worker.telemetry.health import Health, serve_health
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from tests.helpers.compose import (
    COMPOSE_FILE,
    docker_compose,
    healthcheck_argv,
    published,
    resolve,
    services,
    unescape,
    yaml_to_data,
)
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.support import REPO, DevServer, free_port

SERVICES = {
    "postgresql",
    "object-store",
    "stores-setup",
    "temporal",
    "search-attributes",
    "temporal-ui",
    "codec-server",
    "worker",
    "redis",
    "api",
}
ONE_SHOT = {"search-attributes", "stores-setup"}
WORKER_SERVICES = {"worker"}
# What a team sets to run its own agents in the stack: each reaches the workers unchanged.
PASSED_THROUGH = {
    "AGENT_WORKER_AGENTS": "team.agents:registration,team.more:registration",
    "OPENAI_API_KEY": "sk-team",
    "OPENAI_BASE_URL": "http://vllm.internal:8000/v1",
    "AGENT_WORKER_OPENAI_MODEL": "local/qwen2.5-72b",
    "AGENT_WORKER_OPENAI_API": "chat_completions",
    "AGENT_WORKER_PROVIDERS": '{"local": {"base_url": "http://vllm:8000/v1", "api": "chat_completions"}}',
    "AGENT_WORKER_MODEL_PROVIDER": "openai",
    "AGENT_WORKER_BUSINESS_BACKEND": "http",
    "AGENT_WORKER_BUSINESS_DSN": "host=erp.internal dbname=erp",
    "AGENT_WORKER_BUSINESS_URL": "https://erp.internal/api",
    "AGENT_WORKER_BUSINESS_WRITER": "team.erp:writer",
    "AGENT_WORKER_BUSINESS_SYSTEMS": "billing=team.billing:writer",
    "AGENT_WORKER_TENANT_CAPS": "acme=5,*=100",
    "AGENT_WORKER_STATE_DSN": "host=pg.internal dbname=agents",
    "AGENT_WORKER_ARTIFACT_BUCKET": "team-artifacts",
    "AGENT_WORKER_ARTIFACT_PREFIX": "prod/",
    "AGENT_WORKER_ARTIFACT_ENDPOINT_URL": "https://s3.eu-central-1.amazonaws.com",
    "AGENT_WORKER_ARTIFACT_REGION": "eu-central-1",
    "AWS_ACCESS_KEY_ID": "AKIATEAM",
    "AWS_SECRET_ACCESS_KEY": "team-secret",
    "E2B_API_KEY": "e2b_team",
    "E2B_DOMAIN": "e2b.internal",
    "AGENT_WORKER_SANDBOX_BACKEND": "e2b",
}
INDEXED_TYPES = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Bool": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    "KeywordList": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
}


# ---- resolving the compose file -------------------------------------------------------------------


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The compose file as ``docker-compose config`` resolves it with every default."""
    return resolve({}, tmp_path_factory.mktemp("compose"))


# ---- the stack ------------------------------------------------------------------------------------


def test_compose_file_declares_the_whole_stack(config: dict[str, Any]) -> None:
    """Temporal on PostgreSQL, its UI, the codec server, the search-attribute job, the worker, Redis
    and the HTTP API, with the worker, the API and the codec server built from our Dockerfile and
    PostgreSQL and Redis on named volumes."""
    svc = services(config)
    assert set(svc) == SERVICES
    assert svc["temporal"]["environment"]["DB"] == "postgres12"
    assert svc["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"
    assert svc["temporal"]["image"].startswith("temporalio/")
    assert svc["temporal-ui"]["image"].startswith("temporalio/ui:")
    assert svc["search-attributes"]["image"].startswith("temporalio/admin-tools:")
    for name in ("worker", "codec-server", "api"):
        build = svc[name]["build"]
        assert Path(build["context"]).resolve() == REPO
        assert build.get("dockerfile", "Dockerfile") == "Dockerfile"
    assert svc["worker"]["image"] == svc["codec-server"]["image"], "both run the one agent-worker image"
    assert svc["stores-setup"]["image"] == svc["api"]["image"] == svc["worker"]["image"]
    assert svc["redis"]["image"].startswith("redis:")
    assert "redis-data" in config["volumes"] and "redis-data:/data:rw" in svc["redis"]["volumes"]
    assert "postgres-data" in config["volumes"]
    assert "postgres-data:/var/lib/postgresql/data:rw" in svc["postgresql"]["volumes"]


def test_ports_publish_the_frontend_ui_and_codec_on_loopback_only(config: dict[str, Any]) -> None:
    """By default the frontend (7233), the UI (8080), the codec server (8081) and the HTTP API (8091)
    are reachable from this machine only; PostgreSQL, Redis, the jobs and the workers publish
    nothing."""
    svc = services(config)
    assert published(svc["temporal"]) == {("127.0.0.1", 7233, 7233)}
    assert published(svc["temporal-ui"]) == {("127.0.0.1", 8080, 8080)}
    assert published(svc["codec-server"]) == {("127.0.0.1", 8081, 8081)}
    assert published(svc["api"]) == {("127.0.0.1", 8091, 8091)}
    for name in ("postgresql", "object-store", "stores-setup", "search-attributes", "worker", "redis"):
        assert published(svc[name]) == set(), name


def test_the_worker_service_scales(config: dict[str, Any]) -> None:
    """`--scale worker=N` works: no fixed container name or host port, and the replicas keep their
    state in PostgreSQL, their artifacts in the object store and their live streams in Redis
    (readable by whichever worker or API replica, on whichever host, needs them next)."""
    worker = services(config)["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    env = worker["environment"]
    assert env["AGENT_WORKER_STATE_BACKEND"] == "postgres"
    assert "host=postgresql" in env["AGENT_WORKER_STATE_DSN"]
    assert env["AGENT_WORKER_ARTIFACT_BACKEND"] == "s3"
    assert env["AGENT_WORKER_ARTIFACT_ENDPOINT_URL"] == "http://object-store:9000"
    assert env["AGENT_WORKER_BUSINESS_BACKEND"] == "postgres"
    assert env["AGENT_WORKER_STREAM_BACKEND"] == "redis"
    assert env["AGENT_WORKER_STREAM_URL"] == "redis://redis:6379/0"
    assert env["AGENT_WORKER_DATA_DIR"] == "/data"
    assert worker["command"] == ["worker", "--role", "all"]
    # SIGTERM drains: compose waits longer than the worker's own 30 s grace before killing.
    assert worker["stop_signal"] == "SIGTERM"
    assert _seconds(worker["stop_grace_period"]) > 30
    assert worker["init"] is True


def test_worker_services_mount_no_shared_local_volume(config: dict[str, Any]) -> None:
    """No worker service mounts a volume or a host directory: nothing one replica writes is needed
    from its disk by another (the old shared agent-data volume is gone)."""
    svc = services(config)
    for name in WORKER_SERVICES:
        assert not svc[name].get("volumes"), f"{name} mounts {svc[name].get('volumes')}"
    assert "agent-data" not in config.get("volumes", {})
    # The object store and PostgreSQL keep their data on their own named volumes.
    assert "object-store-data:/data:rw" in svc["object-store"]["volumes"]


def test_the_variables_a_team_needs_pass_through_to_the_workers(tmp_path: Path) -> None:
    """Agents, models and providers, the business system, tenant caps, the stores and their
    credentials, and the sandbox tier: each variable set on the host reaches every worker service
    unchanged, and the result is still a valid worker config."""
    svc = services(resolve(PASSED_THROUGH, tmp_path))
    for name in WORKER_SERVICES:
        env = svc[name]["environment"]
        for variable, value in PASSED_THROUGH.items():
            assert unescape(str(env.get(variable))) == value, f"{name}: {variable} does not pass through"
    worker_config = WorkerConfig.from_env(
        {k: unescape(str(v)) for k, v in svc["worker"]["environment"].items()}
    )
    assert worker_config.agents == ["team.agents:registration", "team.more:registration"]
    assert worker_config.providers["local"].api == "chat_completions"
    assert worker_config.artifact_bucket == "team-artifacts"
    # The object store runs with the credentials the workers use.
    store_env = svc["object-store"]["environment"]
    assert (store_env["MINIO_ROOT_USER"], store_env["MINIO_ROOT_PASSWORD"]) == ("AKIATEAM", "team-secret")


def test_the_stores_setup_job_creates_the_database_and_bucket_on_real_services(
    config: dict[str, Any], postgres: PostgresServer, s3_endpoint: str, tmp_path: Path
) -> None:
    """The one-shot job's own command, with its environment pointed at a real PostgreSQL and an
    S3-compatible server, creates the agent_worker database and the artifact bucket; a second run
    (every `up`) finds them and succeeds; a worker's store check then passes on that bucket."""
    import psycopg

    job = services(config)["stores-setup"]
    assert job["entrypoint"][:3] == ["python", "-m", "agent_worker.activities.stores.provision"]
    database = f"agent_worker_{uuid.uuid4().hex[:6]}"
    env = {
        **{k: unescape(str(v)) for k, v in job["environment"].items()},
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "PGHOST": "127.0.0.1",
        "PGPORT": str(postgres.port),
        "PGUSER": "postgres",
        "PROVISION_DATABASE": database,
        "AGENT_WORKER_ARTIFACT_ENDPOINT_URL": s3_endpoint,
        "PROVISION_WAIT_SECONDS": "20",
    }
    assert job["environment"]["PROVISION_DATABASE"] == "agent_worker"
    bucket = env["AGENT_WORKER_ARTIFACT_BUCKET"]
    outputs = []
    for _ in range(2):
        ran = subprocess.run(
            [sys.executable, *job["entrypoint"][1:]], env=env, capture_output=True, text=True, timeout=120
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        outputs.append(ran.stdout)
    assert f"database {database}: created" in outputs[0] and f"bucket {bucket}: created" in outputs[0]
    assert f"database {database}: exists" in outputs[1] and f"bucket {bucket}: exists" in outputs[1]
    psycopg.connect(postgres.dsn_for(database)).close()
    from agent_worker.activities.stores.s3 import S3ArtifactStore

    S3ArtifactStore(bucket, endpoint_url=s3_endpoint).check()


def test_the_docker_sandbox_override_gives_the_socket_to_the_sandbox_worker_only(tmp_path: Path) -> None:
    """docker-compose.sandbox.yml validates on top of the stack: a sandbox-role worker on the Docker
    tier holds the host's Docker socket (its only mount), and the other workers lose the sandbox
    role and mount nothing."""
    empty_env_file = tmp_path / "empty.env"
    empty_env_file.write_text("")
    files = ["-f", str(COMPOSE_FILE), "-f", str(REPO / "docker-compose.sandbox.yml")]
    result = subprocess.run(
        [docker_compose(), *files, "--env-file", str(empty_env_file), "config"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    svc = services(yaml_to_data(result.stdout))
    sandbox = svc["sandbox-worker"]
    assert sandbox["command"] == ["worker", "--role", "sandbox"]
    assert sandbox["volumes"] == ["/var/run/docker.sock:/var/run/docker.sock:rw"]
    assert sandbox["environment"]["AGENT_WORKER_SANDBOX_BACKEND"] == "docker"
    assert sandbox["environment"]["AGENT_WORKER_ARTIFACT_BACKEND"] == "s3"
    assert "sandbox" not in svc["worker"]["command"] and "all" not in svc["worker"]["command"]
    assert not svc["worker"].get("volumes")
    for name, service in svc.items():
        if name != "sandbox-worker":
            assert not any("docker.sock" in str(v) for v in service.get("volumes", [])), name


def test_every_service_is_started_after_what_it_needs(config: dict[str, Any]) -> None:
    """depends_on carries conditions: Temporal waits for a healthy PostgreSQL, the job and the UI
    for a healthy Temporal, the workers also for the search attributes to be registered, and the
    workers and the API for the stores to be set up and Redis to be healthy."""
    svc = services(config)
    conditions = {
        name: {dep: spec["condition"] for dep, spec in service.get("depends_on", {}).items()}
        for name, service in svc.items()
    }
    assert conditions["temporal"] == {"postgresql": "service_healthy"}
    assert conditions["search-attributes"] == {"temporal": "service_healthy"}
    assert conditions["temporal-ui"]["temporal"] == "service_healthy"
    assert conditions["temporal-ui"]["codec-server"] == "service_started"
    assert conditions["worker"] == {
        "temporal": "service_healthy",
        "search-attributes": "service_completed_successfully",
        "stores-setup": "service_completed_successfully",
        "redis": "service_healthy",
    }
    assert conditions["api"] == {
        "temporal": "service_healthy",
        "stores-setup": "service_completed_successfully",
        "redis": "service_healthy",
    }
    assert conditions["redis"] == {}
    assert conditions["stores-setup"] == {"postgresql": "service_healthy", "object-store": "service_healthy"}
    # Every condition names a service that has what it waits for.
    for name, deps in conditions.items():
        for dep, condition in deps.items():
            if condition == "service_healthy":
                assert "healthcheck" in svc[dep], f"{name} waits for {dep} to be healthy, it has no check"
            if condition == "service_completed_successfully":
                assert dep in ONE_SHOT and svc[dep]["restart"] == "no"


def test_every_long_running_service_has_a_health_check(config: dict[str, Any]) -> None:
    """Each service but the one-shot job declares a health check with a real command."""
    for name, service in services(config).items():
        if name in ONE_SHOT:
            assert "healthcheck" not in service
            continue
        check = service.get("healthcheck")
        assert check, f"{name} has no health check"
        assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1, name
        assert check.get("disable") is not True, name
    temporal = services(config)["temporal"]["healthcheck"]["test"]
    assert "temporal operator namespace describe" in temporal[1]
    assert "pg_isready" in services(config)["postgresql"]["healthcheck"]["test"][1]


def test_settings_come_from_the_environment_with_defaults(tmp_path: Path) -> None:
    """Namespace, task queue, role, ports, bind address, image versions, encryption keys and the
    codec token are read from the environment (``${VAR:-default}``), and reach every service that
    uses them (the API included)."""
    key = f"k1:{new_key()}"
    svc = services(
        resolve(
            {
                "TEMPORAL_NAMESPACE": "prod-agents",
                "AGENT_WORKER_TASK_QUEUE": "agent-tasks-blue",
                "AGENT_WORKER_ROLE": "sandbox",
                "PUBLISH_HOST": "0.0.0.0",
                "TEMPORAL_PORT": "17233",
                "TEMPORAL_UI_PORT": "18080",
                "CODEC_PORT": "18081",
                "API_PORT": "18091",
                "TEMPORAL_CODEC_ENDPOINT": "https://codec.example.test",
                "TEMPORAL_VERSION": "9.9.9",
                "AGENT_WORKER_ENCRYPTION_KEYS": key,
                "AGENT_WORKER_ENCRYPTION_KEY_ID": "k1",
                "AGENT_WORKER_CODEC_TOKEN": "s3cret",
                "OPENAI_API_KEY": "sk-test",
            },
            tmp_path,
        )
    )
    assert svc["temporal"]["environment"]["DEFAULT_NAMESPACE"] == "prod-agents"
    assert svc["temporal"]["image"] == "temporalio/auto-setup:9.9.9"
    for name in ("search-attributes", "worker", "api"):
        assert svc[name]["environment"]["TEMPORAL_NAMESPACE"] == "prod-agents", name
        assert svc[name]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233", name
    assert svc["temporal-ui"]["environment"]["TEMPORAL_DEFAULT_NAMESPACE"] == "prod-agents"
    worker = svc["worker"]
    assert worker["environment"]["AGENT_WORKER_TASK_QUEUE"] == "agent-tasks-blue"
    assert worker["environment"]["OPENAI_API_KEY"] == "sk-test"
    assert worker["command"] == ["worker", "--role", "sandbox"]
    assert published(svc["temporal"]) == {("0.0.0.0", 17233, 7233)}
    assert published(svc["temporal-ui"]) == {("0.0.0.0", 18080, 8080)}
    assert published(svc["codec-server"]) == {("0.0.0.0", 18081, 8081)}
    assert published(svc["api"]) == {("0.0.0.0", 18091, 8091)}
    assert "--task-queue=agent-tasks-blue" in svc["api"]["command"]
    ui = svc["temporal-ui"]["environment"]
    assert ui["TEMPORAL_CODEC_ENDPOINT"] == "https://codec.example.test"
    assert ui["TEMPORAL_CORS_ORIGINS"] == "http://localhost:18080"
    assert "--ui-origin=http://localhost:18080" in svc["codec-server"]["command"]
    # The workers encrypt with the keys the codec server and the API decrypt with; only the codec
    # server holds its token.
    for name in ("codec-server", "worker", "api"):
        env = svc[name]["environment"]
        assert (env["AGENT_WORKER_ENCRYPTION_KEYS"], env["AGENT_WORKER_ENCRYPTION_KEY_ID"]) == (key, "k1")
    assert svc["codec-server"]["environment"]["AGENT_WORKER_CODEC_TOKEN"] == "s3cret"
    assert "AGENT_WORKER_CODEC_TOKEN" not in worker["environment"]
    assert "AGENT_WORKER_CODEC_TOKEN" not in svc["api"]["environment"]


def test_the_ui_decodes_through_the_codec_server_by_default(config: dict[str, Any]) -> None:
    """The UI's codec endpoint is the codec server's published port, and the codec server allows
    the UI's published origin."""
    svc = services(config)
    [(_, codec_port, _)] = published(svc["codec-server"])
    [(_, ui_port, _)] = published(svc["temporal-ui"])
    assert svc["temporal-ui"]["environment"]["TEMPORAL_CODEC_ENDPOINT"] == f"http://localhost:{codec_port}"
    assert f"--ui-origin=http://localhost:{ui_port}" in svc["codec-server"]["command"]
    assert svc["codec-server"]["entrypoint"] == ["python", "-m", "agent_worker.security.codec_server"]
    assert "--host=0.0.0.0" in svc["codec-server"]["command"]
    assert {
        "AGENT_WORKER_ENCRYPTION_KEYS",
        "AGENT_WORKER_ENCRYPTION_KEY_ID",
        "AGENT_WORKER_CODEC_TOKEN",
    } <= set(svc["codec-server"]["environment"])


def test_the_worker_environment_is_a_valid_worker_config(config: dict[str, Any]) -> None:
    """Every AGENT_WORKER_* variable the worker service sets is a setting the worker accepts (the
    config is strict: a misspelt one would stop every replica at start)."""
    env = services(config)["worker"]["environment"]
    worker_config = WorkerConfig.from_env(env)
    assert worker_config.task_queue == "agent-tasks"
    assert str(worker_config.data_dir) == "/data"
    assert worker_config.log_format == "json"


def test_the_worker_never_runs_model_code_as_plain_subprocesses_by_default(config: dict[str, Any]) -> None:
    """The worker's sandbox default is `auto` (a contained tier or none, never the process tier),
    the unsafe development setting is not set, and E2B (a contained tier) can be given to it."""
    env = services(config)["worker"]["environment"]
    worker_config = WorkerConfig.from_env(env)
    assert worker_config.sandbox_backend == "auto"
    assert worker_config.sandbox_unsafe_dev is False
    assert "AGENT_WORKER_SANDBOX_UNSAFE_DEV" not in env
    assert "AGENT_WORKER_PROCESS_ISOLATION" not in env
    assert {"E2B_API_KEY", "E2B_DOMAIN"} <= set(env)


# ---- search attributes ----------------------------------------------------------------------------


def registered_pairs(config: dict[str, Any]) -> dict[str, str]:
    job = services(config)["search-attributes"]
    return dict(pair.split("=", 1) for pair in job["environment"]["SEARCH_ATTRIBUTES"].split())


def test_the_registered_search_attributes_are_the_visibility_contract(config: dict[str, Any]) -> None:
    """The job registers exactly ``schemas.visibility.CLI_TYPES``: the same names, the same types."""
    assert registered_pairs(config) == visibility.CLI_TYPES


async def test_the_search_attribute_job_registers_them_on_a_real_server(
    config: dict[str, Any], dev_server: DevServer, client: Client, tmp_path: Path
) -> None:
    """The job's own script, run with the `temporal` CLI against a fresh namespace of the dev
    server, registers every attribute with its type, and a second run (every `up`) succeeds too."""
    namespace = f"compose-{uuid.uuid4().hex[:8]}"
    cli = temporal_binary()
    created = await asyncio.to_thread(
        subprocess.run,
        [cli, "operator", "namespace", "create", "--address", dev_server.address, "-n", namespace],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    job = services(config)["search-attributes"]
    assert job["entrypoint"] == ["/bin/sh", "-c"]
    [script] = job["command"]
    env = {
        **{k: unescape(v) for k, v in job["environment"].items()},
        "TEMPORAL_ADDRESS": dev_server.address,
        "TEMPORAL_NAMESPACE": namespace,
        "PATH": f"{Path(cli).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    for _ in range(2):
        ran = await asyncio.to_thread(
            subprocess.run,
            ["/bin/sh", "-c", unescape(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert f"registered in {namespace}" in ran.stdout
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    assert dict(listed.custom_attributes) == {
        name: INDEXED_TYPES[kind] for name, kind in visibility.CLI_TYPES.items()
    }


# ---- the health checks, run -----------------------------------------------------------------------


async def test_the_worker_health_check_passes_while_serving_and_fails_while_draining(
    config: dict[str, Any],
) -> None:
    """The worker's check asks the worker's real health endpoint (GET /healthz on the port of
    AGENT_WORKER_HEALTH_BIND) with the image's Python: it passes while the worker serves and
    fails while it starts or drains."""
    worker = services(config)["worker"]
    bind = worker["environment"]["AGENT_WORKER_HEALTH_BIND"]
    container_port = int(bind.rsplit(":", 1)[1])
    assert f"http://127.0.0.1:{container_port}/healthz" in " ".join(worker["healthcheck"]["test"])
    health = Health(roles=["all"])
    port = free_port()
    server = await serve_health(f"127.0.0.1:{port}", health)
    argv = healthcheck_argv(worker, container_port, port)

    async def check() -> int:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        return await asyncio.wait_for(proc.wait(), 30)

    try:
        outcomes = {}
        for state in ("starting", "serving", "draining"):
            health.state = state
            outcomes[state] = await check()
    finally:
        server.close()
        await server.wait_closed()
    assert outcomes["serving"] == 0
    assert outcomes["starting"] != 0 and outcomes["draining"] != 0


async def test_the_temporal_health_check_waits_for_the_namespace(
    config: dict[str, Any], dev_server: DevServer, tmp_path: Path
) -> None:
    """Temporal's check (the `temporal` CLI the image carries) passes once the frontend serves the
    namespace, and fails for a namespace that does not exist yet."""
    [kind, command] = services(config)["temporal"]["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    command = unescape(command).replace("temporal:7233", dev_server.address)
    env = {"PATH": f"{Path(temporal_binary()).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    outcomes = {}
    for namespace in ("default", f"missing-{uuid.uuid4().hex[:8]}"):
        ran = await asyncio.to_thread(
            subprocess.run,
            ["/bin/sh", "-c", command],
            env={**env, "DEFAULT_NAMESPACE": namespace},
            capture_output=True,
            timeout=60,
        )
        outcomes[namespace == "default"] = ran.returncode
    assert outcomes[True] == 0
    assert outcomes[False] != 0


def test_the_codec_server_service_starts_and_passes_its_health_check(
    config: dict[str, Any], tmp_path: Path
) -> None:
    """The codec server service's command and environment start the real codec server (on a
    loopback port here), and its health check passes against it; with the service's empty
    default keys it refuses to start and says which variable is missing."""
    service = services(config)["codec-server"]
    port = free_port()
    command = [
        arg.replace("--host=0.0.0.0", "--host=127.0.0.1").replace("--port=8081", f"--port={port}")
        for arg in service["command"]
    ]
    argv = [sys.executable, *service["entrypoint"][1:], *command]
    base_env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}

    refused = subprocess.run(
        argv, env={**base_env, **service["environment"]}, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "AGENT_WORKER_ENCRYPTION_KEYS is not set" in refused.stderr

    env = {
        **base_env,
        **service["environment"],
        "AGENT_WORKER_ENCRYPTION_KEYS": f"k1:{new_key()}",
        "AGENT_WORKER_CODEC_TOKEN": "t0ken",
    }
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        check = healthcheck_argv(service, 8081, port)
        for _ in range(100):
            if subprocess.run(check, capture_output=True, timeout=30).returncode == 0:
                break
            assert proc.poll() is None, f"the codec server exited: {proc.communicate()[1]}"
            time.sleep(0.1)
        else:
            raise AssertionError("the codec server's health check never passed")
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _seconds(duration: str | int | float) -> float:
    """Compose durations: ``45s``, ``1m30s``, or a number of seconds."""
    if isinstance(duration, int | float):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts, f"not a duration: {duration!r}"
    return sum(float(value) * units[unit] for value, unit in parts)
