"""The worker: builds Temporal ``Worker``s from config and runs them until SIGINT/SIGTERM.

Entry point of ``agent-worker worker`` (and ``python worker.py``, the layout's module at the root,
which re-exports this one). It lives inside the package so that a user's own ``worker.py`` on the
import path cannot take its place. Configuration is read once here,
at the edge: ``WorkerConfig`` from ``AGENT_WORKER_*`` variables, the Temporal connection from the
SDK's environment configuration (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``,
TLS, profiles).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
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
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError
from temporalio.worker import Worker, WorkerDeploymentConfig

from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import ArtifactUnavailable
from agent_worker.activities.sdk_shims import deadlock_window_seconds
from agent_worker.activities.stores import state as state_stores
from agent_worker.activities.stores.artifacts import build_artifact_store
from agent_worker.backends import (
    build_authorizer,
    build_event_sink,
    build_sandboxes,
    build_systems,
    build_writer,
)
from agent_worker.connection import connect
from agent_worker.plugin import DEADLOCK_WINDOW, AgentWorkerPlugin, workflow_runner
from agent_worker.schemas import visibility
from agent_worker.schemas.config import EXAMPLE_AGENT, WorkerConfig
from agent_worker.telemetry import configure_logging, configure_tracing, tracing_interceptors
from agent_worker.telemetry.health import Health, serve_health
from agent_worker.telemetry.metrics import prometheus_runtime

log = structlog.get_logger("agent_worker.worker")

GRACEFUL_SHUTDOWN = timedelta(seconds=30)
HEARTBEAT_THROTTLE = timedelta(seconds=2)
_INDEXED_TYPES = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Bool": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    "KeywordList": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
}


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


def build_workers(
    client: Client, config: WorkerConfig, artifact_store: ArtifactStore | None = None
) -> list[Worker]:
    """The Temporal workers of this process, one per task queue ``config`` serves, each built with
    ``AgentWorkerPlugin`` (which adds what its queue serves, as it does for a team's own worker):

    - ``workflows``: task workflows, the reaper workflow, and light activities (input ingest, event
      delivery, tenant admission, thread lookup) on ``config.task_queue``;
    - ``agent``: agent turns, and calls of MCP tools, on ``<queue>.agent`` (holds the model
      provider's key);
    - ``sandbox``: sandbox commands and the reaper on ``<queue>.sandbox`` (needs Docker or E2B),
      and the commands and destroys of the sandboxes this host holds on its home queue
      ``<queue>.sandbox@<host id>`` (``config.host``);
    - ``business``: writes, lookups, authorization checks and own effect tools (``effect_tool``) on
      ``<queue>.business`` (holds the business systems' credentials).

    Only what a role needs is built: a workflows-only worker never touches Docker or the business
    system. Here they also get this process's worker settings (concurrency, cache, shutdown grace,
    deployment version).
    """
    plugin = AgentWorkerPlugin(config, artifact_store=artifact_store)
    common: dict[str, Any] = {
        "max_concurrent_activities": config.max_concurrent_activities,
        "graceful_shutdown_timeout": GRACEFUL_SHUTDOWN,
        # Heartbeats carry cancellation back: a cancelled sandbox command dies within seconds.
        "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
        "plugins": [plugin],
    }
    if config.deployment_name and config.build_id:
        # Auto-upgrade: runs move to the new version's workers at their next workflow task; changes
        # that need it are guarded by workflow.patched (and checked with `agent-worker replay`).
        common["deployment_config"] = WorkerDeploymentConfig(
            version=WorkerDeploymentVersion(config.deployment_name, config.build_id),
            use_worker_versioning=True,
            default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
        )
    elif config.build_id:
        common["build_id"] = config.build_id
    workflow_queue: dict[str, Any] = {
        "max_concurrent_workflow_tasks": config.max_concurrent_workflow_tasks,
        # Sized to the memory budget (workflow_cache_mb); misses are on /metrics.
        "max_cached_workflows": config.workflow_cache_size,
        # A dead worker's tasks move to another worker after this, and so does any task a burst kept
        # waiting here that long (then replayed from history): sticky_timeout_seconds says why 10 s.
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=config.sticky_timeout_seconds),
    }
    return [
        Worker(
            client,
            task_queue=queue,
            **common,
            **(workflow_queue if queue == config.task_queue and "workflows" in config.role_set else {}),
        )
        for queue in plugin.task_queues(client)
    ]


async def check_artifact_store(config: WorkerConfig) -> ArtifactStore:
    """The configured artifact store, once it is proven reachable (bucket, table, directory).

    Raises:
        SystemExit: naming the store and why it cannot be used: the worker refuses to start rather
            than fail every task's first activity.
    """
    store = build_artifact_store(config)
    try:
        await asyncio.to_thread(store.check)
    except ArtifactUnavailable as err:
        raise SystemExit(
            "agent-worker worker: the artifact store "
            f"(AGENT_WORKER_ARTIFACT_BACKEND={config.artifact_backend}) cannot be used: {err}"
        ) from None
    return store


def freeze_startup_heap() -> None:
    """Move every object alive now (the imported SDKs, the agent registry, the clients: most of a
    started worker's objects) out of the cyclic garbage collector's reach. They live as long as the
    process, yet each full collection walked them all again: 7% of a warm worker's CPU per approval
    and 9% with an over-full cache were collections (`python -m bench --only approval_cpu`, measured
    with ``gc.callbacks``). What tasks allocate afterwards is collected as before."""
    gc.collect()
    gc.freeze()


async def run_worker(
    config: WorkerConfig, *, stop: asyncio.Event | None = None, client_overrides: dict[str, Any] | None = None
) -> None:
    """Run until SIGINT/SIGTERM (or ``stop``), then shut down gracefully: stop polling, let
    in-flight activities finish within the grace period."""
    if not config.agents and "agent" in config.role_set:
        raise SystemExit(
            "agent-worker worker: no agents to run: name their registrations in AGENT_WORKER_AGENTS "
            "(module:attribute, comma-separated), e.g. AGENT_WORKER_AGENTS=mypackage.agents:registration "
            f"(`agent-worker demo` runs the example agent, {EXAMPLE_AGENT})"
        )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # Before the workers: it turns the Agents SDK's tracing into OpenTelemetry spans.
    provider = configure_tracing(endpoint=config.otel_endpoint, agents_to_openai=config.agents_tracing)
    client = await connect(
        interceptors=tracing_interceptors(provider),
        config=config,
        runtime=prometheus_runtime(config.metrics_bind),
        **(client_overrides or {}),
    )
    health = Health(roles=sorted(config.role_set))
    health_server = await serve_health(config.health_bind, health) if config.health_bind else None
    if "workflows" in config.role_set:
        await ensure_search_attributes(client)
    artifact_store = await check_artifact_store(config)
    # The journal, admission, authorizer and event sink: reachable and migrated, or no start.
    await asyncio.to_thread(state_stores.check_state_stores, config)
    workers = build_workers(client, config, artifact_store)
    freeze_startup_heap()
    health.task_queues = [w.task_queue for w in workers]
    log.info(
        "worker started",
        roles=health.roles,
        task_queues=health.task_queues,
        namespace=client.namespace,
        agents=config.agents,
        model="openai" if config.uses_openai else "scripted",
        business=config.business_writer or config.business_backend,
        metrics=f"http://{config.metrics_bind}/metrics" if config.metrics_bind else "off",
        pid=os.getpid(),
        # The window in force, as the SDK holds it (tests/test_bounds.py's flood reads it here).
        deadlock_window_seconds=next(
            (w for w in map(deadlock_window_seconds, workers) if w is not None), None
        ),
    )
    try:
        async with contextlib.AsyncExitStack() as running:
            for worker in workers:
                await running.enter_async_context(worker)
            health.state = "serving"
            await stop.wait()
            # Leaving the stack shuts each worker down: polling stops at once, in-flight workflow tasks
            # finish, in-flight activities get the grace period (then are cancelled, and retried by
            # another worker); cached workflows move on after the sticky timeout.
            health.state = "draining"
            log.info(
                "shutting down: draining in-flight work", grace_seconds=GRACEFUL_SHUTDOWN.total_seconds()
            )
    finally:
        if health_server is not None:
            health_server.close()
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


__all__ = [
    "AgentWorkerPlugin",
    "DEADLOCK_WINDOW",
    "build_authorizer",
    "build_event_sink",
    "build_sandboxes",
    "build_workers",
    "check_artifact_store",
    "build_systems",
    "build_writer",
    "connect",
    "ensure_search_attributes",
    "freeze_startup_heap",
    "main",
    "run_worker",
    "workflow_runner",
]
