"""Worker configuration, read once at the edge (worker or CLI start) and passed in explicitly.

Every field can be set by an environment variable named ``AGENT_WORKER_<FIELD>`` (lists are
comma-separated). The Temporal connection is configured separately, by the SDK's standard
environment configuration (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, TLS,
profiles).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from agent_worker.schemas.visibility import (
    DEFAULT_TASK_QUEUE as DEFAULT_TASK_QUEUE,  # re-exported: its old home
)
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

ENV_PREFIX = "AGENT_WORKER_"

# The example agent: the demo registers it itself (`agent-worker demo`); a worker's default is none.
EXAMPLE_AGENT = "agent_worker.examples.monthly_report.agent:registration"
# Worker RSS per workflow in the SDK's cache (a task parked for approval), measured by
# `python -m bench.cache_memory` (bench/results/cache_memory.md); it turns workflow_cache_mb into a count.
# 0.35 until 2026-12-04: passing our workflow code through the workflow sandbox (workflow_passthrough) halved
# it, since an instance no longer imports them again; tests/test_worker_config.py keeps it within 15%
# of the committed measurement.
MB_PER_CACHED_WORKFLOW = 0.17
# The cache's share of a worker's memory target (10,000 parked tasks, all approved at once, within
# 300 MB RSS at its peak): an idle worker with the Agents SDK loaded is about 170 MB, and approving
# (or parking) with every slot busy adds about 35 MB. `python -m bench.parked --tasks 10000`
# (2026-12-04) measured 283 MB parked, peak 317, at 75 MB (441 workflows); 150 MB (882) measured
# 355 MB with 1,500 parked. 50 MB holds 294.
DEFAULT_WORKFLOW_CACHE_MB = 50.0


class ConfigError(ValueError):
    """Raised when configuration is invalid; the message names the variable at fault."""


class ProviderConfig(BaseModel):
    """A model provider, named in model strings by prefix (``local/qwen2`` uses provider ``local``).

    ``kind`` is how the worker talks to it: ``openai`` (the ``openai`` client, for OpenAI and every
    OpenAI-compatible server) or ``litellm`` (the Agents SDK's LiteLLM extension, for providers the
    ``openai`` client does not cover; LiteLLM reads their keys from its own variables when
    ``api_key`` is unset). Unset: ``litellm`` for a provider named ``litellm``, else ``openai``.
    An ``openai``-kind provider needs ``api_key`` unless it has a ``base_url`` (a local server); so
    does LiteLLM's route to OpenAI-compatible servers (``litellm/openai/<model>``).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["openai", "litellm"] | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    api: Literal["responses", "chat_completions"] = Field(
        default="responses",
        description="The OpenAI API an openai-kind provider speaks; most compatible servers (vLLM, "
        "Ollama, LiteLLM proxy) speak chat_completions.",
    )
    timeout_seconds: float | None = Field(
        default=None, gt=0, description="Per-request timeout (unset: the client's default)."
    )


# Settings of AGENT_WORKER_PROVIDER_<NAME>_<SETTING>, longest suffix first.
_PROVIDER_SETTINGS = (
    ("_TIMEOUT_SECONDS", "timeout_seconds"),
    ("_BASE_URL", "base_url"),
    ("_API_KEY", "api_key"),
    ("_TIMEOUT", "timeout_seconds"),
    ("_KIND", "kind"),
    ("_KEY", "api_key"),
    ("_API", "api"),
)
_PROVIDER_PREFIX = ENV_PREFIX + "PROVIDER_"


class WorkerConfig(BaseModel):
    """Everything a worker process needs besides the Temporal connection."""

    model_config = ConfigDict(extra="forbid")

    task_queue: str = Field(default=DEFAULT_TASK_QUEUE, min_length=1)
    roles: list[Literal["all", "workflows", "agent", "sandbox", "business"]] = Field(
        default_factory=lambda: ["all"],
        min_length=1,
        description="What this worker runs, each on its own task queue: 'workflows' (and light "
        "activities) on the task queue, 'agent' turns on <queue>.agent, 'sandbox' commands on "
        "<queue>.sandbox (needs Docker), 'business' writes on <queue>.business (holds the "
        "credentials); 'all' is every role.",
    )
    health_bind: str | None = Field(
        default=None,
        description="host:port of the health endpoint (GET /healthz: 200 serving, 503 draining).",
    )
    deployment_name: str | None = Field(
        default=None,
        description="Worker Deployment name for Temporal worker versioning (with build_id).",
    )
    build_id: str | None = Field(
        default=None, description="This worker's build id within its deployment (e.g. the git sha)."
    )
    data_dir: Path = Path(".agent-worker")
    agents: list[str] = Field(
        default_factory=list,
        description="Agent registrations to load, as 'module:attribute' import paths. None by default: "
        "a worker with none refuses to start (`agent-worker demo` registers the example agent itself).",
    )
    model_provider: Literal["auto", "scripted", "openai"] = Field(
        default="auto",
        description="'auto' uses real models when any provider is configured (OPENAI_API_KEY, "
        "OPENAI_BASE_URL or AGENT_WORKER_PROVIDERS), else each agent's deterministic scripted model; "
        "'openai' always real models; 'scripted' always the scripted ones.",
    )
    openai_model: str = Field(
        default="gpt-4.1-mini",
        description="The model of agents that name none themselves; a 'provider/' prefix picks its "
        "provider (no prefix: openai).",
    )
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    openai_api: Literal["responses", "chat_completions"] = Field(
        default="responses", description="The API the 'openai' provider speaks (OPENAI_BASE_URL servers)."
    )
    openai_timeout_seconds: float | None = Field(default=None, gt=0)
    providers: dict[str, ProviderConfig] = Field(
        default_factory=dict,
        description='Model providers by name, as JSON ({"local": {"base_url": ..., "api": '
        '"chat_completions"}}), or one setting a variable: AGENT_WORKER_PROVIDER_<NAME>_BASE_URL, '
        "_API_KEY (or _KEY), _API, _TIMEOUT_SECONDS, _KIND. 'openai' defaults to the OPENAI_* settings.",
    )
    sandbox_backend: Literal["auto", "docker", "e2b", "process"] = Field(
        default="auto",
        description="What a task's sandbox backend 'auto' means here: 'auto' picks docker when its daemon "
        "and image are available, else e2b when configured, else none: sandbox commands are then refused "
        "with the reason (auto never picks the process tier). Naming a backend this worker cannot run "
        "is an error at start.",
    )
    docker_image: str = Field(default="agent-worker-sandbox:bookworm", min_length=1)
    e2b_api_key: SecretStr | None = None
    e2b_domain: str | None = None
    e2b_template: str = "base"
    process_isolation: Literal["auto", "bwrap", "none"] = Field(
        default="auto",
        description="How the process tier (sandbox_backend=process) isolates commands: 'bwrap' "
        "(bubblewrap; the worker proves its isolation at start or refuses to start), 'auto' (the same), "
        "or 'none' (a plain subprocess: needs sandbox_unsafe_dev).",
    )
    sandbox_unsafe_dev: bool = Field(
        default=False,
        description="UNSAFE, development only: let the process tier run commands as plain subprocesses "
        "of the worker (host files, network, Docker socket reachable) when it cannot prove isolation "
        "or process_isolation=none. Never set it where model code is not trusted.",
    )
    host_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="This worker's host, for the sandboxes it holds (process and docker tiers live on "
        "the host that made them): a sandbox worker also polls its home queue <queue>.sandbox@<host_id>, "
        "and a task sends every command and the destroy of its sandbox there. Default: the machine's "
        "hostname plus a digest of the data dir, so workers with their own data dirs are their own "
        "hosts and a worker restarted on the same data dir is the same host. Workers that share a data "
        "dir and a Docker daemon may share one host id.",
    )
    sandbox_home_wait_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="How long a task waits for the host that holds its sandbox to take a command "
        "(schedule-to-start on its home queue) before it counts the sandbox as lost and rebuilds it "
        "elsewhere (for the destroy: leaves it to that host's reaper). Recorded in each sandbox this "
        "worker creates. Default: workflows.options.SANDBOX_HOME_WAIT (60 s), longer than a worker "
        "restart.",
    )
    deployment_id: str | None = Field(
        default=None,
        description="Which deployment owns the sandboxes this worker creates (a label on each); the "
        "reaper removes only sandboxes of its own Temporal namespace and deployment. Default: the task "
        "queue.",
    )
    business_backend: Literal["sqlite", "postgres", "http"] = Field(
        default="sqlite", description="Where business writes go (sqlite is the embedded default)."
    )
    business_dsn: SecretStr | None = Field(
        default=None, description="PostgreSQL DSN for business_backend=postgres."
    )
    business_url: str | None = Field(default=None, description="Base URL for business_backend=http.")
    business_writer: str | None = Field(
        default=None, description="A custom writer as 'module:factory'; the factory gets the config."
    )
    business_systems: dict[str, str] = Field(
        default_factory=dict,
        description="More business systems, by name: 'billing=pkg.mod:factory,crm=pkg.crm:factory' (each "
        "factory gets the config and returns a writer). A write tool's BusinessWrite(system='billing') "
        "goes there; without a system, writes go to the default writer above.",
    )
    otel_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector base URL for traces (also OTEL_EXPORTER_OTLP_ENDPOINT).",
    )
    tenant_caps: dict[str, int] = Field(
        default_factory=dict,
        description="Running tasks allowed per tenant, e.g. 'acme=5,*=100' ('*': every other tenant).",
    )
    encryption_keys: SecretStr | None = Field(
        default=None,
        description="Payload encryption keys as 'KEY_ID:BASE64KEY,...' (AES-256); keep old keys while "
        "histories written under them are open. Unset: payloads are stored as plain JSON.",
    )
    encryption_key_id: str | None = Field(
        default=None, description="The key id new payloads are encrypted with (needed with several keys)."
    )
    codec_token: SecretStr | None = Field(
        default=None,
        description="Bearer token the codec server (python -m agent_worker.security.codec_server) requires.",
    )
    metrics_bind: str | None = Field(
        default=None, description="host:port of the Prometheus /metrics endpoint (SDK and task metrics)."
    )
    event_sink: str | None = Field(
        default=None,
        description="A custom event sink as 'module:factory' (gets the config); default: JSON lines per "
        "task under <data dir>/events/.",
    )
    authorizer: str | None = Field(
        default=None,
        description="A custom authorizer as 'module:factory' (gets the config); default: the SQLite "
        "revocation list in the data dir (agent-worker revoke / grant).",
    )
    artifact_backend: Literal["local", "s3", "postgres"] = Field(
        default="local",
        description="Where artifacts (inputs, outputs, stored runs, evidence parts) live: 'local' (a "
        "directory in the data dir; a fleet must share it), 's3' (S3-compatible object storage: "
        "artifact_bucket; credentials from the standard AWS environment, AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY, AWS_PROFILE...) or 'postgres' (a table in artifact_dsn).",
    )
    artifact_bucket: str | None = Field(default=None, description="The bucket of artifact_backend=s3.")
    artifact_prefix: str = Field(
        default="", description="A key prefix inside the bucket (e.g. 'agent-worker/'), for a shared bucket."
    )
    artifact_endpoint_url: str | None = Field(
        default=None,
        description="The endpoint of an S3-compatible server (MinIO, Ceph, R2...); unset: AWS S3.",
    )
    artifact_region: str | None = Field(
        default=None,
        description="The bucket's region (unset: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1).",
    )
    artifact_dsn: SecretStr | None = Field(
        default=None,
        description="PostgreSQL DSN for artifact_backend=postgres (unset: state_dsn, when it is set).",
    )
    state_backend: Literal["local", "postgres"] = Field(
        default="local",
        description="Where the shared state other than artifacts lives (model-call journal, tenant "
        "admission, authorizer revocations, event sink): 'local' (files and SQLite in the data dir; one "
        "host) or 'postgres' (tables in state_dsn, for a fleet; the worker applies missing migrations at "
        "start, `agent-worker migrate` applies them beforehand).",
    )
    state_dsn: SecretStr | None = Field(
        default=None, description="PostgreSQL DSN (libpq string or URL) of state_backend=postgres."
    )
    stream_backend: Literal["none", "local", "redis"] = Field(
        default="local",
        description="Where a task's live stream goes (model tokens, tool calls, step boundaries; out "
        "of band, never in history; best effort, the event sink stays the audit record): 'local' (a "
        "SQLite file in the data dir; readers on the same host), 'redis' (Redis Streams at stream_url, "
        "for a fleet) or 'none' (no live stream).",
    )
    stream_url: SecretStr | None = Field(
        default=None, description="The Redis URL of stream_backend=redis (redis://host:6379/0)."
    )
    stream_retention: int = Field(
        default=10_000,
        ge=10,
        description="Entries kept per task's stream; older ones are trimmed (a reader that far behind "
        "is told of the gap).",
    )
    api_max_body_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        description="The HTTP API (agent-worker api): the largest request body it reads. A larger one "
        "is refused (413) before it is read, by its Content-Length or as its chunks arrive; a request "
        "that does not authenticate is refused (401) before any of its body is read.",
    )
    api_max_streams: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description="The HTTP API: Server-Sent Event streams (/events, /stream) one principal may hold "
        "open at once; one more is refused with 429.",
    )
    api_cors_origins: list[str] = Field(
        default_factory=list,
        description="The HTTP API: browser origins allowed to call it cross-origin (CORS), exact "
        "('https://app.example.com'), comma-separated. None by default: no cross-origin call is allowed.",
    )
    api_allowed_hosts: list[str] = Field(
        default_factory=list,
        description="The HTTP API in header mode (--auth header): Host names it answers besides "
        "localhost and loopback addresses (the name your proxy forwards); any other Host gets 421, "
        "so DNS rebinding cannot reach it through a browser.",
    )
    api_stream_token_minutes: float = Field(
        default=10.0,
        gt=0,
        le=1440,
        description="The HTTP API: how long a stream token (POST /v1/tasks/{id}/stream-token, for "
        "browsers' EventSource) may open its task's /events or /stream.",
    )
    api_stream_token_secret: SecretStr | None = Field(
        default=None,
        description="The HTTP API: the key stream tokens are signed with. Unset: a random key per "
        "process (tokens die with it); set the same secret on every API process behind one balancer.",
    )
    api_header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="The HTTP API: how long a connection may take to send a request's headers "
        "(and how long an idle kept-alive connection stays open) before it is closed.",
    )
    notify_webhook_url: SecretStr | None = Field(
        default=None,
        description="Approval reminders and escalations (a policy rule's sla) are POSTed here as JSON "
        "with a Slack-compatible 'text' (a Slack incoming webhook URL works as is).",
    )
    notify_smtp_url: SecretStr | None = Field(
        default=None,
        description="...and emailed through this SMTP server: smtp://[user:password@]host:port (smtps:// "
        "for TLS), to the addresses in notify_emails.",
    )
    notify_email_from: str = Field(default="agent-worker@localhost", description="The emails' sender.")
    notify_emails: dict[str, str] = Field(
        default_factory=dict,
        description="Each approver principal's email address, e.g. 'finance-lead=fl@example.com,cfo=cfo@"
        "example.com'; a principal without one gets no email (the notification says so).",
    )
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    max_concurrent_activities: int = Field(default=64, ge=1)
    max_concurrent_workflow_tasks: int = Field(default=64, ge=1)
    sticky_timeout_seconds: float = Field(
        default=10.0,
        ge=1,
        description="How long a workflow task waits on this worker's own (sticky) queue before it goes "
        "to the task queue, where any worker takes it and replays the task from history: how soon a "
        "dead worker's cached tasks move on, and how long a burst may queue here before each of its "
        "tasks is replayed elsewhere. 10 s is the Temporal SDK's default; 5 s turned a burst of 500 "
        "approvals into 274 replays and 0.4x the throughput (bench/findings.md).",
    )
    workflow_cache_mb: float = Field(
        default=DEFAULT_WORKFLOW_CACHE_MB,
        gt=0,
        description="Memory budget of the workflow cache, in MB: the worker keeps as many workflows in "
        f"memory as fit at {MB_PER_CACHED_WORKFLOW} MB each (measured by bench/cache_memory.py; the "
        f"default, {DEFAULT_WORKFLOW_CACHE_MB:g} MB, holds "
        f"{int(DEFAULT_WORKFLOW_CACHE_MB / MB_PER_CACHED_WORKFLOW)}). A task out of the cache replays "
        "from history at its next step, about 20 ms more worker CPU than a cached one: watch "
        "temporal_sticky_cache_miss on /metrics, and raise the budget while misses are frequent and "
        "memory allows. max_cached_workflows, when set, wins.",
    )
    max_cached_workflows: int | None = Field(
        default=None,
        ge=0,
        description="Workflows kept in memory, as a count (unset: as many as workflow_cache_mb "
        "allows); others replay from history at their next step. 0 replays every workflow task (and "
        "the SDK re-runs the local activities each eviction cuts short): for tests, not production.",
    )
    agents_tracing: bool = Field(
        default=False, description="Export OpenAI Agents SDK traces (needs OPENAI_API_KEY)."
    )
    workflow_sandbox: bool = Field(
        default=False,
        description="Run agent-worker's own workflows in the SDK's workflow sandbox. Off (the default), "
        "they run as the SDK's UnsandboxedWorkflowRunner runs them: about 3% less worker CPU per warm "
        "approval and 6% less per cache miss (bench/findings.md). What the sandbox would refuse in them, "
        "`scripts/check_workflows.py` refuses before they run, and tests/test_full_sandbox.py replays "
        "every committed history in the SDK's full sandbox. A workflow of your own on the same worker "
        "stays sandboxed either way.",
    )
    workflow_passthrough: bool = Field(
        default=True,
        description="Import the workflow code (`workflows`) once, outside the workflow sandbox, instead "
        "of again for every workflow instance: a cache miss costs 18.4 ms instead of 33.6 "
        "(`python -m bench.sandbox_passthrough`). `scripts/check_workflows.py` (run by `make test`) "
        "refuses in it, and in the code of ours it runs, what the sandbox would stop. Off: the SDK's "
        "full sandbox for the workflow code (libraries and our payload models stay passed through). "
        "Only with workflow_sandbox on.",
    )
    workflow_deadlock_window_seconds: float = Field(
        default=20.0,
        ge=0,
        description="Seconds one workflow activation may run before the SDK fails its workflow task "
        "as deadlocked. 0: the SDK's own window (2 s). Wider, a worker starved of CPU still gets "
        "through a large activation (a backlog of signals replayed after a cache miss); workflow code "
        "never blocks, so it only lets such a backlog finish. A flood of 10,000 stale decisions sent by "
        "the update `decide` leaves no backlog and passes at load average 5 with the SDK's own window "
        "(tests/test_flood_decide.py); one sent as signals needs the wider window at load 10.",
    )
    colocate: bool = Field(
        default=True,
        description="When this worker runs workflows and also the agent or sandbox role, tasks it "
        "admits schedule that work on the task queue itself, where it starts without a queue wait "
        "(eager dispatch), instead of on `<queue>.agent` / `.sandbox`. A task whose activity reaches a "
        "worker without the role moves back to the role queue by itself.",
    )
    run_state: Literal["when_needed", "always"] = Field(
        default="when_needed",
        description="Store the SDK's RunState after a turn that proposed actions: only when the "
        "conversation alone would not continue the run exactly (a handoff, tool_use_behavior, "
        "tool_choice, input guardrails), or always. Resuming it costs more with every item.",
    )
    rebase_after_items: int = Field(
        default=60,
        ge=0,
        description="Resume a stored RunState while the conversation has at most this many items; past "
        "it, start the next turn from the conversation plus the workflow's results (the same text for "
        "the model, but linear cost: the SDK's RunState validation grows with every item).",
    )
    compact_after_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Compact an agent's conversation before a turn once it passes this many tokens "
        "(estimated at 4 characters a token): one model call summarizes the older items into one "
        "message, the most recent items stay as they are. An agent's own compact_after_tokens wins; "
        "None (both): never compact.",
    )
    price_input_per_mtok: float = Field(
        default=0.0, ge=0, description="USD per million input tokens, for cost estimates and budgets."
    )
    price_output_per_mtok: float = Field(default=0.0, ge=0, description="USD per million output tokens.")

    @model_validator(mode="after")
    def _deployment_needs_both(self) -> WorkerConfig:
        if (self.deployment_name is None) != (self.build_id is None):
            raise ValueError("deployment_name and build_id go together: set both or neither")
        return self

    @model_validator(mode="after")
    def _artifact_backend_settings(self) -> WorkerConfig:
        if self.artifact_backend == "s3" and not self.artifact_bucket:
            raise ValueError("AGENT_WORKER_ARTIFACT_BACKEND=s3 needs AGENT_WORKER_ARTIFACT_BUCKET")
        if self.artifact_backend == "postgres" and self.artifact_postgres_dsn is None:
            raise ValueError(
                "AGENT_WORKER_ARTIFACT_BACKEND=postgres needs AGENT_WORKER_ARTIFACT_DSN "
                "(or AGENT_WORKER_STATE_DSN)"
            )
        return self

    @model_validator(mode="after")
    def _state_backend_settings(self) -> WorkerConfig:
        if self.state_backend == "postgres" and self.state_dsn is None:
            raise ValueError("AGENT_WORKER_STATE_BACKEND=postgres needs AGENT_WORKER_STATE_DSN")
        return self

    @model_validator(mode="after")
    def _stream_backend_settings(self) -> WorkerConfig:
        if self.stream_backend == "redis" and self.stream_url is None:
            raise ValueError("AGENT_WORKER_STREAM_BACKEND=redis needs AGENT_WORKER_STREAM_URL")
        return self

    @property
    def workflow_cache_size(self) -> int:
        """Workflows the worker caches: ``max_cached_workflows`` when set, else as many as
        ``workflow_cache_mb`` holds at ``MB_PER_CACHED_WORKFLOW`` each."""
        if self.max_cached_workflows is not None:
            return self.max_cached_workflows
        return int(self.workflow_cache_mb / MB_PER_CACHED_WORKFLOW)

    @property
    def artifact_postgres_dsn(self) -> SecretStr | None:
        """The DSN of artifact_backend=postgres: ``artifact_dsn``, else the state DSN."""
        return self.artifact_dsn or getattr(self, "state_dsn", None)

    @property
    def role_set(self) -> frozenset[str]:
        """The roles this worker runs, with 'all' spelled out."""
        if "all" in self.roles:
            return frozenset({"workflows", "agent", "sandbox", "business"})
        return frozenset(self.roles)

    def cost_usd(self, input_tokens: int, output_tokens: int, *, real: bool | None = None) -> float:
        """Estimated cost of a model's tokens at the configured prices (0 for scripted models).

        ``real`` says whether the tokens were a real model's (unset: whether this config uses them).
        """
        if not (self.uses_openai if real is None else real):
            return 0.0
        return (input_tokens * self.price_input_per_mtok + output_tokens * self.price_output_per_mtok) / 1e6

    @property
    def host(self) -> str:
        """This worker's host id: ``host_id``, else the hostname plus a digest of the data dir."""
        if self.host_id:
            return self.host_id
        name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:60] or "host"
        digest = hashlib.sha256(str(self.data_dir.resolve()).encode("utf-8")).hexdigest()[:8]
        return f"{name}-{digest}"

    @property
    def sandbox_deployment(self) -> str:
        """The deployment id sandboxes are labelled with (``deployment_id``, else the task queue)."""
        return self.deployment_id or self.task_queue

    @property
    def artifact_dir(self) -> Path:
        """Where the content-addressed artifact store lives."""
        return self.data_dir / "artifacts"

    @property
    def business_db(self) -> Path:
        """The SQLite business store of the embedded default."""
        return self.data_dir / "business.db"

    @property
    def events_dir(self) -> Path:
        """The default event sink's directory: one JSON-lines file per task."""
        return self.data_dir / "events"

    @property
    def admission_db(self) -> Path:
        """The running set behind tenant caps."""
        return self.data_dir / "admission.db"

    @property
    def authz_db(self) -> Path:
        """The default authorizer's revocation list."""
        return self.data_dir / "authz.db"

    @property
    def journal_dir(self) -> Path:
        """Where completed model calls are journaled, so a retried turn does not repeat them."""
        return self.data_dir / "journal"

    @property
    def stream_db(self) -> Path:
        """The local stream backend's SQLite file."""
        return self.data_dir / "streams.db"

    @property
    def sandbox_root(self) -> Path:
        """Where process-tier sandboxes keep their work dirs."""
        return self.data_dir / "sandboxes"

    @property
    def uses_openai(self) -> bool:
        """Whether agent turns call real models (OpenAI, a compatible server, any configured
        provider) instead of scripted models."""
        if self.model_provider == "auto":
            return bool(self.openai_api_key is not None or self.openai_base_url or self.providers)
        return self.model_provider == "openai"

    def model_providers(self) -> dict[str, ProviderConfig]:
        """The configured providers by name: ``openai`` from the ``OPENAI_*`` settings (an entry
        of ``providers`` called ``openai`` replaces it), then ``providers``."""
        openai = ProviderConfig(
            kind="openai",
            base_url=self.openai_base_url,
            api_key=self.openai_api_key,
            api=self.openai_api,
            timeout_seconds=self.openai_timeout_seconds,
        )
        merged = {"openai": openai, "litellm": ProviderConfig(kind="litellm")}
        for name, provider in self.providers.items():
            kind = provider.kind or ("litellm" if name == "litellm" else "openai")
            merged[name] = provider.model_copy(update={"kind": kind})
        return merged

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: object) -> WorkerConfig:
        """Build the config from ``AGENT_WORKER_*`` variables (plus ``OPENAI_*``), then overrides.

        Raises:
            ConfigError: naming the variable whose value is invalid or unknown.
        """
        values: dict[str, object] = {}
        providers: dict[str, dict[str, str]] = {}
        for key, raw in env.items():
            if not key.startswith(ENV_PREFIX):
                continue
            if key.startswith(_PROVIDER_PREFIX):
                name, setting = _provider_setting(key)
                providers.setdefault(name, {})[setting] = raw
                continue
            field = key[len(ENV_PREFIX) :].lower()
            if field not in cls.model_fields:
                raise ConfigError(f"{key}: unknown setting (known: {_known_settings()})")
            values[field] = _parse_env_value(field, raw)
        for env_key, field in (
            ("OPENAI_API_KEY", "openai_api_key"),
            ("OPENAI_BASE_URL", "openai_base_url"),
            ("E2B_API_KEY", "e2b_api_key"),
            ("E2B_DOMAIN", "e2b_domain"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel_endpoint"),
        ):
            if env.get(env_key) and field not in values:
                values[field] = env[env_key]
        if providers:
            merged = dict(values.get("providers") or {})  # type: ignore[call-overload]
            for name, settings in providers.items():
                merged[name] = {**merged.get(name, {}), **settings}
            values["providers"] = merged
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as err:
            problems = "; ".join(f"{_variable(e['loc'])}: {e['msg']}" for e in err.errors())
            raise ConfigError(f"invalid configuration: {problems}") from None


def _parse_env_value(field: str, raw: str) -> object:
    """Lists and maps are comma-separated in the environment (``a,b``; ``k=v,k2=v2``)."""
    if field in ("agents", "roles", "api_cors_origins", "api_allowed_hosts"):
        return [p.strip() for p in raw.split(",") if p.strip()]
    if field in ("tenant_caps", "business_systems", "notify_emails"):
        pairs = [p.strip().split("=", 1) for p in raw.split(",") if p.strip()]
        return {k.strip(): v.strip() for k, *rest in pairs for v in rest or [""]}
    if field == "providers":
        if not raw.strip():  # passed through empty (compose's ${AGENT_WORKER_PROVIDERS:-})
            return {}
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as err:
            # The position only: the value may hold keys.
            raise ConfigError(f"{ENV_PREFIX}PROVIDERS: not valid JSON ({err.msg} at {err.pos})") from None
        if not isinstance(parsed, dict):
            raise ConfigError(f"{ENV_PREFIX}PROVIDERS: a JSON object of providers by name is expected")
        return parsed
    return raw


def _variable(loc: tuple[int | str, ...]) -> str:
    """The variable a validation error's location points at (a provider's own setting if it is one)."""
    if not loc:
        return "configuration"
    if loc[0] == "providers" and len(loc) >= 3:
        return f"{_PROVIDER_PREFIX}{str(loc[1]).upper()}_{str(loc[2]).upper()}"
    return f"{ENV_PREFIX}{str(loc[0]).upper()}"


def _provider_setting(key: str) -> tuple[str, str]:
    """``AGENT_WORKER_PROVIDER_LOCAL_BASE_URL`` -> (``local``, ``base_url``).

    Raises:
        ConfigError: the variable names no known setting or no provider.
    """
    rest = key[len(_PROVIDER_PREFIX) :]
    for suffix, setting in _PROVIDER_SETTINGS:
        if rest.endswith(suffix) and len(rest) > len(suffix):
            return rest[: -len(suffix)].lower(), setting
    known = ", ".join(suffix[1:] for suffix, _ in _PROVIDER_SETTINGS)
    raise ConfigError(
        f"{key}: unknown provider setting (AGENT_WORKER_PROVIDER_<NAME>_<SETTING>, SETTING one of {known})"
    )


def _known_settings() -> str:
    return ", ".join(ENV_PREFIX + name.upper() for name in WorkerConfig.model_fields)
