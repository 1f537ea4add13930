"""The backends a worker's activities use, built from config: sandbox tiers, the business writer and
systems, the event sink and the authorizer (``agent_worker.worker`` re-exports them)."""

from __future__ import annotations

import structlog

from agent_worker.activities.authz import Authorizer
from agent_worker.activities.business import BusinessWriter, SqliteBusinessStore, load_writer
from agent_worker.activities.errors import SandboxError
from agent_worker.activities.events import EventSink
from agent_worker.activities.sandbox import ProcessSandbox, Sandbox
from agent_worker.activities.sandbox.docker import DockerSandbox, docker_available
from agent_worker.activities.stores import state as state_stores
from agent_worker.activities.stores.memory import MEMORY_SYSTEM, build_memory_store
from agent_worker.schemas.config import ConfigError, WorkerConfig
from agent_worker.schemas.sandbox import SandboxBackend

log = structlog.get_logger("agent_worker.worker")


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
        from agent_worker.activities.sandbox.e2b import E2BSandbox

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
        from agent_worker.activities.business.postgres import PostgresBusinessStore

        return PostgresBusinessStore(config.business_dsn.get_secret_value())
    if config.business_backend == "http":
        if not config.business_url:
            raise ConfigError("AGENT_WORKER_BUSINESS_BACKEND=http needs AGENT_WORKER_BUSINESS_URL")
        from agent_worker.activities.business.http import HttpBusinessWriter

        return HttpBusinessWriter(config.business_url)
    return SqliteBusinessStore(config.business_db)


def build_systems(config: WorkerConfig) -> dict[str, BusinessWriter]:
    """The named business systems besides the default (``business_systems``), each from its factory,
    and ``memory`` (``activities.stores.memory``).

    Raises:
        ConfigError: a factory cannot be loaded or fails.
    """
    systems = {}
    for name, path in config.business_systems.items():
        try:
            systems[name] = load_writer(path, config=config)
        except Exception as err:
            raise ConfigError(f"AGENT_WORKER_BUSINESS_SYSTEMS: system {name!r} ({path}): {err}") from None
    # Agent memory (the ``remember`` tool) is a business system of its own, in the state backend,
    # unless a system of that name is configured.
    if MEMORY_SYSTEM not in systems:
        systems[MEMORY_SYSTEM] = build_memory_store(config)
    return systems


def build_event_sink(config: WorkerConfig) -> EventSink:
    """Where task events are delivered (``activities.stores.state.build_event_sink``)."""
    return state_stores.build_event_sink(config)


def build_authorizer(config: WorkerConfig) -> Authorizer:
    """The authorizer asked right before approved actions run
    (``activities.stores.state.build_authorizer``)."""
    return state_stores.build_authorizer(config)


__all__ = ["build_authorizer", "build_event_sink", "build_sandboxes", "build_systems", "build_writer"]
