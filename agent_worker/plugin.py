"""agent-worker as a Temporal plugin: our workflows and activities, added to any ``Worker``.

``AgentWorkerPlugin`` is a ``temporalio.plugin.SimplePlugin`` (the shape of the SDK's OpenAI Agents
and pydantic-ai plugins). Given to ``Client.connect``, it sets the client's data converter (pydantic,
with payload encryption when the config has keys) and every ``Worker`` built from that client gets
what its task queue serves; given to a ``Worker`` (``plugins=[...]``), that worker alone. It looks at
the task queue of each worker it configures and adds that queue's part:

- ``config.task_queue``: the task, reaper and doctor workflows (in the worker's workflow runner:
  ``workflow_runner``) and their light activities, and, for the roles this config serves there
  (``colocate``), agent turns and sandbox commands;
- ``<queue>.agent``, ``<queue>.sandbox`` (and this host's ``<queue>.sandbox@<host>``),
  ``<queue>.business``: that role's activities.

A worker on any other queue is left as it was. ``agent-worker worker`` builds its workers this
way too (``agent_worker.worker.build_workers``): there is one path. Replayers given the plugin get
the workflows, the runner and the converter.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.plugin import SimplePlugin
from temporalio.worker import ReplayerConfig, WorkerConfig
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agent_worker.activities.agent import AgentActivities, AgentRegistry
from agent_worker.activities.agent.providers import use_bundled_litellm_cost_map
from agent_worker.activities.artifacts import ArtifactActivities, ArtifactStore
from agent_worker.activities.authz import AuthzActivities
from agent_worker.activities.business import BusinessActivities
from agent_worker.activities.events import EventActivities
from agent_worker.activities.forks import ForkActivities
from agent_worker.activities.grants import GrantActivities
from agent_worker.activities.health import HealthActivities
from agent_worker.activities.notify import NotifyActivities, build_notifiers
from agent_worker.activities.sandbox import SandboxActivities, SandboxHere
from agent_worker.activities.sandbox.reaper import ReaperActivities, SandboxReaper
from agent_worker.activities.sdk_shims import AgentWorkflowRunner
from agent_worker.activities.shadow import ShadowActivities
from agent_worker.activities.stores import live_events
from agent_worker.activities.stores import state as state_stores
from agent_worker.activities.stores.artifacts import build_artifact_store
from agent_worker.activities.tenants import TenantActivities
from agent_worker.activities.threads import ThreadActivities
from agent_worker.activities.tools.activities import ToolActivities
from agent_worker.backends import (
    build_authorizer,
    build_event_sink,
    build_sandboxes,
    build_systems,
    build_writer,
)
from agent_worker.schemas.config import WorkerConfig as AgentWorkerConfig
from agent_worker.security.codec import converter_for
from agent_worker.security.redact import register_config_secrets
from agent_worker.workflows import (
    AgentTaskWorkflow,
    FleetDoctorWorkflow,
    SandboxReaperWorkflow,
    ShadowRunWorkflow,
    ShadowTaskWorkflow,
)
from agent_worker.workflows.options import (
    AGENT_QUEUE_SUFFIX,
    BUSINESS_QUEUE_SUFFIX,
    SANDBOX_QUEUE_SUFFIX,
    home_queue,
)
from agent_worker.workflows.placement import COLOCATABLE

PLUGIN_NAME = "agent_worker.AgentWorkerPlugin"
WORKFLOWS = (
    AgentTaskWorkflow,
    SandboxReaperWorkflow,
    FleetDoctorWorkflow,
    ShadowRunWorkflow,
    ShadowTaskWorkflow,
)
# How long one workflow activation may run before the SDK calls it deadlocked and fails the workflow
# task (the SDK's own window is 2 s, with no public setting: ``activities.sdk_shims``). Workers and
# replays both run with it (``workflow_runner``). An activation carrying a signal backlog
# (thousands of decisions sent while a workflow task ran) is CPU work in the SDK, about 0.3 ms a
# signal here, and far slower on a starved worker. Failed at 2 s, its retry replays the same backlog
# plus what came since, so a flooded task could fail its workflow task for good. Our workflow code
# never blocks (no I/O, checked by the replays), so a wider window only lets a backlog finish.
# ``workflow_deadlock_window_seconds`` picks it (0: the SDK's own). Decisions by update leave no
# backlog: tests/test_flood_decide.py floods one with the SDK's own window at load average 5. The
# 10,000-signal flood passed with it at load 6.3 and 7.1 and failed at 9.8 (2026-12-05), so the
# default stays wide.
DEADLOCK_WINDOW = timedelta(seconds=20)
# Library packages the workflow sandbox (``workflow_sandbox`` on, and the full-sandbox replays) passes
# through beyond the SDK's default set, each with why.
# The default set already holds what our workflow modules import themselves: the standard library,
# temporalio, pydantic (with pydantic_core, typing_extensions, annotated_types). Our payload models,
# activity classes and the helpers workflow code calls (``schemas``, ``activities``,
# ``telemetry.metrics``, ``security.signing``) are passed through where workflow code imports them,
# with the SDK's documented ``workflow.unsafe.imports_passed_through()``: one copy of each payload
# class for the converter, and no per-instance import of the Agents SDK behind the activity classes.
# Our workflow code (``workflows``) is imported inside the sandbox, with its restrictions, unless
# ``WORKFLOW_CODE`` passes it through.
LIBRARY_PASSTHROUGH: dict[str, str] = {
    # Policy conditions (``schemas.conditions``): workflow code compiles and evaluates CEL with it
    # (a rule's ``when``, validated with the task input). Pure and deterministic: no clock,
    # randomness or I/O is reachable from an expression. Imported inside the sandbox it fails (its
    # parser, lark, imports ``regex``, which makes a lock at import: RestrictedWorkflowAccessError on
    # ``threading.RLock``, every workflow task of a task with a condition failing), and it would be
    # imported afresh per workflow instance; passed through, one copy and its program cache serve all.
    "celpy": "policy conditions (CEL), evaluated in workflow code",
}
# Our workflows run outside the sandbox unless ``workflow_sandbox`` is on (``workflow_runner``): with
# our code passed through, the sandbox checked none of it at run time, and still cost its import
# hooks on every activation and its instance on every cache miss (bench/findings.md, 2026-12-07).
# With it on, our workflow code is passed through too unless ``workflow_passthrough`` is off, for
# speed alone: a sandbox imports it again for every workflow instance a cache miss builds, 15 ms of
# a 33.6 ms live miss against 18.4 ms passed through (+83%; `python -m bench.sandbox_passthrough`,
# 2026-12-05), and a copy per cached workflow. What the sandbox would refuse in our workflow code,
# ``scripts/check_workflows.py`` refuses before it runs, and tests/test_full_sandbox.py replays every
# committed history in the SDK's unmodified sandbox with ``LIBRARY_PASSTHROUGH`` alone.
WORKFLOW_CODE = ("agent_worker.workflows",)


def workflow_runner(
    passthrough: bool = True, deadlock_window: timedelta | None = DEADLOCK_WINDOW, *, sandboxed: bool = False
) -> SandboxedWorkflowRunner:
    """The runner the worker runs workflows in, and replays check them with
    (``activities.sdk_shims.AgentWorkflowRunner``): ``WORKFLOWS`` outside the workflow sandbox unless
    ``sandboxed``; in it (``sandboxed``, and any workflow of the user's on the same worker) the
    SDK's ``SandboxedWorkflowRunner`` with ``LIBRARY_PASSTHROUGH`` passed through (and
    ``WORKFLOW_CODE`` unless ``passthrough`` is off), payload contexts answered without entering it;
    ``deadlock_window`` for activations (None: the SDK's own 2 s)."""
    from agent_worker.schemas.conditions import warm_conditions

    warm_conditions()  # policy conditions compile inside activations: not the parser's first build
    passed = [*LIBRARY_PASSTHROUGH, *(WORKFLOW_CODE if passthrough else ())]
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*passed)
    return AgentWorkflowRunner(
        restrictions=restrictions,
        deadlock_window=deadlock_window,
        unsandboxed=frozenset() if sandboxed else frozenset(WORKFLOWS),
    )


def config_runner(config: AgentWorkerConfig) -> SandboxedWorkflowRunner:
    """``workflow_runner`` as ``config`` asks for it (``workflow_sandbox``, ``workflow_passthrough``,
    ``workflow_deadlock_window_seconds``: 0 for the SDK's own window)."""
    seconds = config.workflow_deadlock_window_seconds
    window = timedelta(seconds=seconds) if seconds > 0 else None
    return workflow_runner(config.workflow_passthrough, window, sandboxed=config.workflow_sandbox)


class AgentWorkerPlugin(SimplePlugin):
    """agent-worker's workflows and activities for the Temporal workers it is given to.

    Args:
        config: the worker configuration (``WorkerConfig.from_env(os.environ)`` reads it as
            ``agent-worker worker`` does): task queue, roles, agents, backends.
        artifact_store: the artifact store to use (default: built from ``config``).

    Building it does the process-wide setup the agent role needs (LiteLLM's bundled cost map, the
    Agents SDK's tracing off unless configured) and registers the config's secrets for redaction.
    Backends (sandboxes, business systems, stores) are built once, at the first worker configured.
    """

    def __init__(self, config: AgentWorkerConfig, *, artifact_store: ArtifactStore | None = None) -> None:
        self.config = config
        roles = config.role_set
        if "agent" in roles:
            # Before any agent module can import LiteLLM: its cost map from the bundle, not the internet.
            use_bundled_litellm_cost_map()
        if "agent" in roles and not (config.agents_tracing or config.otel_endpoint):
            from agents import set_tracing_disabled

            set_tracing_disabled(True)
        # From here on, logs, activity errors and events mask the configured secrets (security.redact).
        register_config_secrets(config, os.environ)
        self._store = artifact_store
        self._queues: dict[str, list[Callable[..., Any]]] | None = None
        super().__init__(
            PLUGIN_NAME,
            data_converter=converter_for(config),
            workflow_runner=config_runner(config),
        )

    def task_queues(self, client: Client) -> list[str]:
        """The task queues this config serves (the task queue first), each with work to poll."""
        return list(self._activities(client))

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Add the part of the worker's task queue (nothing for a queue that is not ours)."""
        queue = config.get("task_queue")
        activities = self._activities(config["client"]).get(queue or "")
        if activities is None:
            return config
        config["activities"] = [*config.get("activities", []), *activities]
        if queue == self.config.task_queue and "workflows" in self.config.role_set:
            config["workflows"] = [*config.get("workflows", []), *WORKFLOWS]
            config["workflow_runner"] = config_runner(self.config)
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """Replayers get the workflows too, in the same runner and converter as the workers."""
        config = super().configure_replayer(config)
        config["workflows"] = [*config.get("workflows", []), *WORKFLOWS]
        return config

    def _activities(self, client: Client) -> dict[str, list[Callable[..., Any]]]:
        if self._queues is None:
            self._queues = _queue_activities(client, self.config, self._store)
        return self._queues


def _queue_activities(
    client: Client, config: AgentWorkerConfig, artifact_store: ArtifactStore | None
) -> dict[str, list[Callable[..., Any]]]:
    """The activities of each task queue ``config`` serves, the task queue first; only what a role
    needs is built: a workflows-only worker never touches Docker or the business system."""
    roles = config.role_set
    store = artifact_store if artifact_store is not None else build_artifact_store(config)
    queue = config.task_queue
    role_activities: dict[str, list[Any]] = {}
    registry = AgentRegistry.from_import_paths(config.agents) if roles & {"agent", "business"} else None
    if "agent" in roles:
        assert registry is not None
        journal = state_stores.build_journal(config)
        agent = AgentActivities(
            registry,
            store,
            config,
            journal,
            state_stores.build_stream_backend(config),
            state_stores.build_grant_store(config),
        )
        tools = ToolActivities(registry, store, config)
        # Shadow runs' candidate turns and scorers (``workflows.shadow_task``) need what turns need.
        shadow = ShadowActivities(store, config, journal)
        role_activities[AGENT_QUEUE_SUFFIX] = [
            agent.turn,
            agent.plan,
            tools.call_function,
            tools.call_mcp,
            shadow.turn,
            shadow.score,
        ]
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
    queues = {queue + suffix: activities for suffix, activities in role_activities.items()}
    if "workflows" in roles:
        queues = {queue: _task_queue_activities(client, config, store, role_activities, sandbox), **queues}
    return queues


def _task_queue_activities(
    client: Client,
    config: AgentWorkerConfig,
    store: ArtifactStore,
    role_activities: dict[str, list[Any]],
    sandbox: SandboxActivities | None,
) -> list[Callable[..., Any]]:
    """The activities of the task queue itself: the workflows' light ones, and the roles served here."""
    queue = config.task_queue
    roles = config.role_set
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
    grants = GrantActivities(state_stores.build_grant_store(config))
    # Agent and sandbox work comes to the task queue itself too: from tasks admitted where those
    # roles are served there (above), and from runs begun before the queues were split. This
    # process serves it there when it has those roles.
    served_here = [
        a for suffix in (AGENT_QUEUE_SUFFIX, SANDBOX_QUEUE_SUFFIX) for a in role_activities.get(suffix, [])
    ]
    here = SandboxHere(sandbox)
    shadow = ShadowActivities(store, config)
    return [
        shadow.load,
        shadow.save,
        shadow.report,
        artifacts.ingest,
        artifacts.archive,
        artifacts.archive_stored,
        events.publish,
        events.publish_here,  # local: in the workflow task that recorded the events
        # Asked first for a command and at a task's end: this worker usually holds the task's sandbox.
        here.exec_here,
        here.destroy_here,
        tenants.admit,
        tenants.release,
        threads.resume,
        ForkActivities(client, store).prepare,
        notify.send,
        grants.save,
        HealthActivities(client).check,
        *served_here,
    ]


__all__ = ["AgentWorkerPlugin", "DEADLOCK_WINDOW", "LIBRARY_PASSTHROUGH", "WORKFLOW_CODE", "workflow_runner"]
