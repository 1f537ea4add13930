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
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.agent import AgentActivities, AgentRegistry
from activities.agent.providers import use_bundled_litellm_cost_map
from activities.artifacts import ArtifactActivities, ArtifactStore
from activities.authz import Authorizer, AuthzActivities
from activities.business import BusinessActivities, BusinessWriter, SqliteBusinessStore, load_writer
from activities.errors import ArtifactUnavailable, SandboxError
from activities.events import EventActivities, EventSink
from activities.health import HealthActivities
from activities.notify import NotifyActivities, build_notifiers
from activities.sandbox import ProcessSandbox, Sandbox, SandboxActivities, SandboxHere
from activities.sandbox.docker import DockerSandbox, docker_available
from activities.sandbox.reaper import ReaperActivities, SandboxReaper
from activities.stores import live_events
from activities.stores import state as state_stores
from activities.stores.artifacts import build_artifact_store
from activities.tenants import TenantActivities
from activities.threads import ThreadActivities
from activities.tools.activities import ToolActivities
from agent_worker.connection import connect
from agent_worker.workflow_runner import DirectContextRunner
from schemas import visibility
from schemas.config import EXAMPLE_AGENT, ConfigError, WorkerConfig
from schemas.sandbox import SandboxBackend
from security.redact import register_config_secrets
from telemetry import configure_logging, configure_tracing, tracing_interceptors
from telemetry.health import Health, serve_health
from telemetry.metrics import prometheus_runtime
from workflows import AgentTaskWorkflow, FleetDoctorWorkflow, SandboxReaperWorkflow
from workflows.options import AGENT_QUEUE_SUFFIX, BUSINESS_QUEUE_SUFFIX, SANDBOX_QUEUE_SUFFIX, home_queue
from workflows.placement import COLOCATABLE

log = structlog.get_logger("agent_worker.worker")

GRACEFUL_SHUTDOWN = timedelta(seconds=30)
HEARTBEAT_THROTTLE = timedelta(seconds=2)
STICKY_TIMEOUT = timedelta(seconds=5)
# The project's packages the workflow sandbox passes through (``workflow_passthrough``): imported once,
# shared by every workflow instance, where the sandbox would import them again for each one.
PASSED_THROUGH = ("workflows", "schemas", "activities", "telemetry", "security", "agent_worker")


def workflow_runner(passthrough: bool = True) -> SandboxedWorkflowRunner:
    """The workflow sandbox the worker runs workflows in (and replays check them with): the SDK's,
    entered only to run workflow code (``DirectContextRunner``), with ``PASSED_THROUGH`` passed
    through unless ``passthrough`` is off. What the sandbox no longer
    checks in those modules, ``scripts/check_workflows.py`` does."""
    if not passthrough:
        return DirectContextRunner()
    return DirectContextRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    )


# How long one workflow activation may run before the SDK calls it deadlocked and fails the workflow
# task (the SDK's own window is 2 s, with no public setting). An activation carrying a signal backlog
# (thousands of decisions sent while a workflow task ran) is CPU work in the SDK, about 0.3 ms a
# signal here, and far slower on a starved worker. Failed at 2 s, its retry replays the same backlog
# plus what came since, so a flooded task could fail its workflow task for good. Our workflow code
# never blocks (no I/O, checked by the replays), so a wider window only lets a backlog finish.
DEADLOCK_WINDOW = timedelta(seconds=20)

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


def build_sandboxes(
    config: WorkerConfig, namespace: str = "default"
) -> tuple[dict[SandboxBackend, Sandbox], SandboxBackend | None, str | None]:
    """The sandbox backends this worker offers, what a task's ``auto`` means here, and (when
    ``auto`` has no contained tier to mean) why, for the refusal.

    Docker and E2B are offered whenever they are usable, and ``auto`` picks one of them, never the
    process tier. The process tier (trusted use only) is offered only when it is this worker's
    configured backend, so a task cannot ask its way out of isolation, and only once it has proven its
    isolation (or ``sandbox_unsafe_dev`` says to run without). Sandboxes are labelled with
    ``namespace`` and the config's deployment, which is all the reaper here may judge.

    Raises:
        ConfigError: the configured backend cannot run here, or the process tier is not isolated
            (and why, and how to fix it).
    """
    backends: dict[SandboxBackend, Sandbox] = {}
    owner = {"namespace": namespace, "deployment": config.sandbox_deployment}
    docker_problem = docker_available(config.docker_image)
    if docker_problem is None:
        backends[SandboxBackend.DOCKER] = DockerSandbox(config.docker_image, **owner)
    elif config.sandbox_backend == "docker":
        raise ConfigError(f"AGENT_WORKER_SANDBOX_BACKEND=docker, but {docker_problem}")
    if config.e2b_api_key is not None:
        from activities.sandbox.e2b import E2BSandbox

        backends[SandboxBackend.E2B] = E2BSandbox.from_config(config, namespace)
    elif config.sandbox_backend == "e2b":
        raise ConfigError("AGENT_WORKER_SANDBOX_BACKEND=e2b needs E2B_API_KEY")
    unavailable = None
    default: SandboxBackend | None
    if config.sandbox_backend == "auto":
        default = next((b for b in (SandboxBackend.DOCKER, SandboxBackend.E2B) if b in backends), None)
        if default is None:
            unavailable = (
                f"sandbox backend 'auto' found no contained tier: docker: {docker_problem}; e2b: "
                "E2B_API_KEY is not set. Fix: start Docker and build the image (agent-worker "
                "sandbox-image), or set E2B_API_KEY; the process tier runs only when named "
                "(AGENT_WORKER_SANDBOX_BACKEND=process)"
            )
            log.error("no contained sandbox tier: sandbox commands will be refused", reason=unavailable)
    else:
        default = SandboxBackend(config.sandbox_backend)
    if default is SandboxBackend.PROCESS:
        try:
            backends[SandboxBackend.PROCESS] = ProcessSandbox(
                config.sandbox_root,
                config.process_isolation,
                unsafe_dev=config.sandbox_unsafe_dev,
                **owner,
            )
        except SandboxError as err:
            raise ConfigError(f"AGENT_WORKER_SANDBOX_BACKEND=process: {err}") from None
    log.info(
        "sandbox backends",
        default=default.value if default else None,
        offered=sorted(b.value for b in backends),
        docker=docker_problem or "available",
    )
    return backends, default, unavailable


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


def build_systems(config: WorkerConfig) -> dict[str, BusinessWriter]:
    """The named business systems besides the default (``business_systems``), each from its factory.

    Raises:
        ConfigError: a factory cannot be loaded or fails.
    """
    systems = {}
    for name, path in config.business_systems.items():
        try:
            systems[name] = load_writer(path, config=config)
        except Exception as err:
            raise ConfigError(f"AGENT_WORKER_BUSINESS_SYSTEMS: system {name!r} ({path}): {err}") from None
    return systems


def build_event_sink(config: WorkerConfig) -> EventSink:
    """Where task events are delivered (``activities.stores.state.build_event_sink``)."""
    return state_stores.build_event_sink(config)


def build_authorizer(config: WorkerConfig) -> Authorizer:
    """The authorizer asked right before approved actions run
    (``activities.stores.state.build_authorizer``)."""
    return state_stores.build_authorizer(config)


def build_workers(
    client: Client, config: WorkerConfig, artifact_store: ArtifactStore | None = None
) -> list[Worker]:
    """The Temporal workers of this process, one per role in ``config.roles``, each on its own queue:

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
    system.
    """
    roles = config.role_set
    if "agent" in roles:
        # Before any agent module can import LiteLLM: its cost map from the bundle, not the internet.
        use_bundled_litellm_cost_map()
    if "agent" in roles and not (config.agents_tracing or config.otel_endpoint):
        from agents import set_tracing_disabled

        set_tracing_disabled(True)
    # From here on, logs, activity errors and events mask the configured secrets (security.redact).
    register_config_secrets(config, os.environ)
    store = artifact_store if artifact_store is not None else build_artifact_store(config)
    common: dict[str, Any] = {
        "max_concurrent_activities": config.max_concurrent_activities,
        "graceful_shutdown_timeout": GRACEFUL_SHUTDOWN,
        # Heartbeats carry cancellation back: a cancelled sandbox command dies within seconds.
        "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
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
    queue = config.task_queue
    role_activities: dict[str, list[Any]] = {}
    registry = AgentRegistry.from_import_paths(config.agents) if roles & {"agent", "business"} else None
    if "agent" in roles:
        assert registry is not None
        agent = AgentActivities(
            registry,
            store,
            config,
            state_stores.build_journal(config),
            state_stores.build_stream_backend(config),
        )
        tools = ToolActivities(registry, store, config)
        role_activities[AGENT_QUEUE_SUFFIX] = [agent.turn, agent.plan, tools.call_function, tools.call_mcp]
    sandbox: SandboxActivities | None = None
    if "sandbox" in roles:
        backends, default, unavailable = build_sandboxes(config, client.namespace)
        # This host's own queue: the sandboxes it makes live here, and their tasks send their
        # commands and destroy back to it (``workflows.placement.at_home``).
        home = home_queue(queue, config.host)
        sandbox = SandboxActivities(
            backends,
            store,
            default,
            unavailable=unavailable,
            home_queue=home,
            home_wait_seconds=config.sandbox_home_wait_seconds,
        )
        reaper = ReaperActivities(SandboxReaper(list(backends.values()), client))
        role_activities[SANDBOX_QUEUE_SUFFIX] = [
            sandbox.place,
            sandbox.create,
            sandbox.exec,
            sandbox.destroy,
            reaper.reap,
        ]
        role_activities[home[len(queue) :]] = [sandbox.create, sandbox.exec, sandbox.destroy]
    if "business" in roles:
        authorizer = build_authorizer(config)
        # The writes check their approval themselves (``WriteInput.authz``); ``authz.check`` stays for
        # the other effects and for runs from before that.
        business = BusinessActivities(build_writer(config), build_systems(config), authorizer)
        authz = AuthzActivities(authorizer)
        # Own functions declared with ``effect_tool`` (role ``business``) run here, beside the writes.
        assert registry is not None
        own_tools = ToolActivities(registry, store, config)
        role_activities[BUSINESS_QUEUE_SUFFIX] = [
            business.write,
            business.lookup,
            authz.check,
            own_tools.call_function,
        ]
    workers = [
        Worker(client, task_queue=queue + suffix, activities=activities, **common)
        for suffix, activities in role_activities.items()
    ]
    if "workflows" in roles:
        artifacts = ArtifactActivities(store)
        events = EventActivities(build_event_sink(config))
        streams = state_stores.build_stream_backend(config)
        if streams is not None:  # lifecycle events into the live stream as the workflows emit them
            live_events.register(queue, streams)
        # Tasks this worker admits schedule agent and sandbox work on the task queue itself when it
        # serves those roles there (``workflows.placement``): it then starts without a queue wait.
        colocated = [r for r in COLOCATABLE if r in roles] if config.colocate else []
        tenants = TenantActivities(state_stores.build_admission(config, client), colocated)
        threads = ThreadActivities(client, store)
        notify = NotifyActivities(build_notifiers(config), state_stores.build_notification_ledger(config))
        # Agent and sandbox work comes to the task queue itself too: from tasks admitted where those
        # roles are served there (above), and from runs begun before the queues were split. This
        # process serves it there when it has those roles.
        served_here = [
            a
            for suffix in (AGENT_QUEUE_SUFFIX, SANDBOX_QUEUE_SUFFIX)
            for a in role_activities.get(suffix, [])
        ]
        here = SandboxHere(sandbox)
        workers.insert(
            0,
            Worker(
                client,
                task_queue=queue,
                workflows=[AgentTaskWorkflow, SandboxReaperWorkflow, FleetDoctorWorkflow],
                activities=[
                    artifacts.ingest,
                    artifacts.archive,
                    artifacts.archive_stored,
                    events.publish,
                    events.publish_here,  # local: in the workflow task that recorded the events
                    # Asked first for a command and at a task's end: this worker usually holds the
                    # task's sandbox.
                    here.exec_here,
                    here.destroy_here,
                    tenants.admit,
                    tenants.release,
                    threads.resume,
                    notify.send,
                    HealthActivities(client).check,
                    *served_here,
                ],
                max_concurrent_workflow_tasks=config.max_concurrent_workflow_tasks,
                # Sized to the memory budget (workflow_cache_mb); misses are on /metrics.
                max_cached_workflows=config.workflow_cache_size,
                workflow_runner=workflow_runner(config.workflow_passthrough),
                # A dead worker's tasks move to another worker after this (the SDK's default is 10 s).
                sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
                **common,
            ),
        )
        widen_deadlock_window(workers[0], DEADLOCK_WINDOW)
    return workers


def widen_deadlock_window(worker: Worker, window: timedelta) -> None:
    """Give ``worker``'s workflow activations ``window`` before the SDK calls them deadlocked.

    The SDK has no public setting for it; this sets the attribute its workflow worker reads
    (temporalio 1.x), and refuses loudly when that is gone rather than run with the 2 s window.
    """
    workflows = getattr(worker, "_workflow_worker", None)
    if workflows is None or not hasattr(workflows, "_deadlock_timeout_seconds"):
        raise RuntimeError("temporalio changed: its workflow worker has no deadlock window to set")
    if workflows._deadlock_timeout_seconds is not None:  # None: the SDK's debug mode, no detection
        workflows._deadlock_timeout_seconds = window.total_seconds()


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
    "build_authorizer",
    "build_event_sink",
    "build_sandboxes",
    "build_workers",
    "check_artifact_store",
    "build_systems",
    "build_writer",
    "connect",
    "ensure_search_attributes",
    "main",
    "run_worker",
]
