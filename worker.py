"""The worker: builds Temporal ``Worker``s from config and runs them until SIGINT/SIGTERM.

Entry point of ``agent-worker worker`` (and ``python worker.py``). Configuration is read once here,
at the edge: ``WorkerConfig`` from ``AGENT_WORKER_*`` variables, the Temporal connection from the
SDK's environment configuration (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``,
TLS, profiles).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import structlog
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.agent import AgentActivities, AgentRegistry
from activities.artifacts import ArtifactActivities, LocalArtifactStore
from activities.authz import Authorizer, AuthzActivities, SqliteAuthorizer
from activities.business import BusinessActivities, BusinessWriter, SqliteBusinessStore, load_writer
from activities.events import EventActivities, EventSink, JsonlEventSink
from activities.loading import load_object
from activities.sandbox import ProcessSandbox, Sandbox, SandboxActivities
from activities.sandbox.docker import DockerSandbox, docker_available
from activities.sandbox.reaper import ReaperActivities, SandboxReaper
from activities.tenants import TenantActivities, TenantAdmission
from schemas import visibility
from schemas.config import ConfigError, WorkerConfig
from schemas.sandbox import SandboxBackend
from telemetry import configure_logging, configure_tracing, tracing_interceptors
from telemetry.metrics import prometheus_runtime
from workflows import AgentTaskWorkflow, SandboxReaperWorkflow
from workflows.options import BUSINESS_QUEUE_SUFFIX

log = structlog.get_logger("agent_worker.worker")

DEFAULT_ADDRESS = "localhost:7233"
GRACEFUL_SHUTDOWN = timedelta(seconds=30)
HEARTBEAT_THROTTLE = timedelta(seconds=2)
STICKY_TIMEOUT = timedelta(seconds=5)

_INDEXED_TYPES = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Bool": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    "KeywordList": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
}


async def connect(*, interceptors: Sequence[Any] = (), **overrides: Any) -> Client:
    """Connect to Temporal as the SDK's environment configuration says (default localhost:7233).
    Workers made from the client inherit its ``interceptors`` (tracing)."""
    connect_config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    connect_config.setdefault("target_host", DEFAULT_ADDRESS)
    connect_config.update({k: v for k, v in overrides.items() if v is not None})
    return await Client.connect(
        **connect_config, data_converter=pydantic_data_converter, interceptors=list(interceptors)
    )


async def ensure_search_attributes(client: Client) -> None:
    """Register the task search attributes if the namespace lacks them (dev server, self-hosted).

    Where the operator API is not available (Temporal Cloud), log how to add them instead.
    """
    namespace = client.namespace
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        missing = {
            name: _INDEXED_TYPES[kind]
            for name, kind in visibility.CLI_TYPES.items()
            if name not in listed.custom_attributes
        }
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
            )
            log.info("registered search attributes", names=sorted(missing), namespace=namespace)
    except RPCError as err:
        log.warning(
            "could not check search attributes; register them yourself",
            error=str(err),
            attributes=visibility.CLI_TYPES,
        )


def build_sandboxes(config: WorkerConfig) -> tuple[dict[SandboxBackend, Sandbox], SandboxBackend]:
    """The sandbox backends this worker offers, and what a task's ``auto`` means here.

    Docker and E2B are offered whenever they are usable. The process tier (trusted use only) is
    offered only when it is this worker's default, so a task cannot ask its way out of isolation.

    Raises:
        ConfigError: the configured backend cannot run here (and why).
    """
    backends: dict[SandboxBackend, Sandbox] = {}
    docker_problem = docker_available(config.docker_image)
    if docker_problem is None:
        backends[SandboxBackend.DOCKER] = DockerSandbox(config.docker_image)
    elif config.sandbox_backend == "docker":
        raise ConfigError(f"AGENT_WORKER_SANDBOX_BACKEND=docker, but {docker_problem}")
    if config.e2b_api_key is not None:
        from activities.sandbox.e2b import E2BSandbox

        backends[SandboxBackend.E2B] = E2BSandbox.from_config(config)
    elif config.sandbox_backend == "e2b":
        raise ConfigError("AGENT_WORKER_SANDBOX_BACKEND=e2b needs E2B_API_KEY")
    if config.sandbox_backend == "auto":
        default = SandboxBackend.DOCKER if SandboxBackend.DOCKER in backends else SandboxBackend.PROCESS
    else:
        default = SandboxBackend(config.sandbox_backend)
    if default is SandboxBackend.PROCESS:
        backends[SandboxBackend.PROCESS] = ProcessSandbox(config.sandbox_root, config.process_isolation)
    log.info(
        "sandbox backends",
        default=default.value,
        offered=sorted(b.value for b in backends),
        docker=docker_problem or "available",
    )
    return backends, default


def build_writer(config: WorkerConfig) -> BusinessWriter:
    """The business system writes go to, as configured.

    Raises:
        ConfigError: the chosen backend misses its setting (DSN, URL).
    """
    if config.business_writer:
        return load_writer(config.business_writer, config=config)
    if config.business_backend == "postgres":
        if config.business_dsn is None:
            raise ConfigError("AGENT_WORKER_BUSINESS_BACKEND=postgres needs AGENT_WORKER_BUSINESS_DSN")
        from activities.business.postgres import PostgresBusinessStore

        return PostgresBusinessStore(config.business_dsn.get_secret_value())
    if config.business_backend == "http":
        if not config.business_url:
            raise ConfigError("AGENT_WORKER_BUSINESS_BACKEND=http needs AGENT_WORKER_BUSINESS_URL")
        from activities.business.http import HttpBusinessWriter

        return HttpBusinessWriter(config.business_url)
    return SqliteBusinessStore(config.business_db)


def build_event_sink(config: WorkerConfig) -> EventSink:
    """Where task events are delivered."""
    if config.event_sink:
        return load_object(config.event_sink, "event sink")(config=config)
    return JsonlEventSink(config.events_dir)


def build_authorizer(config: WorkerConfig) -> Authorizer:
    """The authorizer asked right before approved actions run."""
    if config.authorizer:
        return load_object(config.authorizer, "authorizer")(config=config)
    return SqliteAuthorizer(config.authz_db)


def build_workers(client: Client, config: WorkerConfig) -> list[Worker]:
    """Two workers in one process: task workflows with their agent, sandbox and artifact activities
    on ``config.task_queue``; business writes, lookups and authorization checks on
    ``<task queue>.business`` (run that one only where business credentials may live)."""
    if not (config.agents_tracing or config.otel_endpoint):
        from agents import set_tracing_disabled

        set_tracing_disabled(True)
    store = LocalArtifactStore(config.artifact_dir)
    agent = AgentActivities(AgentRegistry.from_import_paths(config.agents), store, config)
    backends, default = build_sandboxes(config)
    sandbox = SandboxActivities(backends, store, default)
    reaper = ReaperActivities(SandboxReaper(list(backends.values()), client))
    artifacts = ArtifactActivities(store)
    events = EventActivities(build_event_sink(config))
    tenants = TenantActivities(TenantAdmission(config.admission_db, config.tenant_caps, client))
    business = BusinessActivities(build_writer(config))
    authz = AuthzActivities(build_authorizer(config))
    common: dict[str, Any] = {
        "max_concurrent_activities": config.max_concurrent_activities,
        "graceful_shutdown_timeout": GRACEFUL_SHUTDOWN,
        # Heartbeats carry cancellation back: a cancelled sandbox command dies within seconds.
        "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
    }
    tasks = Worker(
        client,
        task_queue=config.task_queue,
        workflows=[AgentTaskWorkflow, SandboxReaperWorkflow],
        activities=[
            agent.turn,
            agent.plan,
            sandbox.create,
            sandbox.exec,
            sandbox.destroy,
            reaper.reap,
            artifacts.ingest,
            events.publish,
            tenants.admit,
            tenants.release,
        ],
        max_concurrent_workflow_tasks=config.max_concurrent_workflow_tasks,
        max_cached_workflows=config.max_cached_workflows,
        # A dead worker's tasks move to another worker after this (the SDK's default is 10 s).
        sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        **common,
    )
    writes = Worker(
        client,
        task_queue=config.task_queue + BUSINESS_QUEUE_SUFFIX,
        activities=[business.write, business.lookup, authz.check],
        **common,
    )
    return [tasks, writes]


async def run_worker(
    config: WorkerConfig, *, stop: asyncio.Event | None = None, client_overrides: dict[str, Any] | None = None
) -> None:
    """Run until SIGINT/SIGTERM (or ``stop``), then shut down gracefully: stop polling, let
    in-flight activities finish within the grace period."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # Before the workers: it turns the Agents SDK's tracing into OpenTelemetry spans.
    provider = configure_tracing(endpoint=config.otel_endpoint, agents_to_openai=config.agents_tracing)
    client = await connect(
        interceptors=tracing_interceptors(provider),
        runtime=prometheus_runtime(config.metrics_bind),
        **(client_overrides or {}),
    )
    await ensure_search_attributes(client)
    workers = build_workers(client, config)
    log.info(
        "worker started",
        task_queues=[w.task_queue for w in workers],
        namespace=client.namespace,
        agents=config.agents,
        model="openai" if config.uses_openai else "scripted",
        business=config.business_writer or config.business_backend,
        metrics=f"http://{config.metrics_bind}/metrics" if config.metrics_bind else "off",
        pid=os.getpid(),
    )
    async with contextlib.AsyncExitStack() as running:
        for worker in workers:
            await running.enter_async_context(worker)
        await stop.wait()
        log.info("shutting down: draining in-flight work", grace_seconds=GRACEFUL_SHUTDOWN.total_seconds())
    if provider is not None:
        provider.shutdown()  # flush the last batch of spans
    log.info("worker stopped")


def main(argv: Sequence[str] | None = None) -> int:
    """``python worker.py``: run a worker configured from the environment."""
    config = WorkerConfig.from_env(os.environ)
    configure_logging(config)
    asyncio.run(run_worker(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
