"""The one place the shared state stores are built from a config (``state_backend``): the
model-call journal, tenant admission, the authorizer, the event sink, the notification ledger and
the remembered grants;
and the live streams (``stream_backend``).

The worker, the CLI (``events``, ``revoke``/``grant``, ``api``, ``migrate``) and the tests go
through these factories, so nothing builds a local store behind the config's back. A plug-in
authorizer or event sink (``AGENT_WORKER_AUTHORIZER`` / ``AGENT_WORKER_EVENT_SINK``) takes
precedence over the backend. Building a store contacts nothing; ``check_state_stores`` does (the
worker calls it at start).
"""

from __future__ import annotations

from typing import Any

from agent_worker.activities.agent.journal import ModelCallJournal
from agent_worker.activities.authz import Authorizer, SqliteAuthorizer
from agent_worker.activities.events import EventSink, JsonlEventSink
from agent_worker.activities.grants import GrantStore, SqliteGrantStore
from agent_worker.activities.loading import load_object
from agent_worker.activities.notify.ledger import NotificationLedger, SqliteNotificationLedger
from agent_worker.activities.stores.streams import SqliteStreamBackend, StreamBackend
from agent_worker.activities.tenants import TenantAdmission
from agent_worker.schemas.config import ConfigError, WorkerConfig
from temporalio.client import Client


def _dsn(config: WorkerConfig) -> str:
    if config.state_dsn is None:
        raise ConfigError("AGENT_WORKER_STATE_BACKEND=postgres needs AGENT_WORKER_STATE_DSN")
    return config.state_dsn.get_secret_value()


def _postgres() -> Any:
    try:
        from agent_worker.activities.stores import postgres
    except ImportError as err:
        raise ConfigError(
            "AGENT_WORKER_STATE_BACKEND=postgres needs psycopg and psycopg-pool: "
            f"pip install 'agent-worker[postgres]' ({err})"
        ) from None
    return postgres


def build_journal(config: WorkerConfig) -> ModelCallJournal:
    """The model-call journal turns answer completed calls from."""
    if config.state_backend == "postgres":
        return _postgres().PostgresJournal(_dsn(config))
    return ModelCallJournal(config.journal_dir)


def build_admission(config: WorkerConfig, client: Client) -> TenantAdmission:
    """Tenant admission under ``config.tenant_caps``."""
    if config.state_backend == "postgres":
        return _postgres().PostgresAdmission(_dsn(config), config.tenant_caps, client)
    return TenantAdmission(config.admission_db, config.tenant_caps, client)


def build_authorizer(config: WorkerConfig) -> Authorizer:
    """The authorizer asked right before approved actions run."""
    if config.authorizer:
        return load_object(config.authorizer, "authorizer")(config=config)
    if config.state_backend == "postgres":
        return _postgres().PostgresAuthorizer(_dsn(config))
    return SqliteAuthorizer(config.authz_db)


def build_event_sink(config: WorkerConfig) -> EventSink:
    """Where task events are delivered."""
    if config.event_sink:
        return load_object(config.event_sink, "event sink")(config=config)
    if config.state_backend == "postgres":
        return _postgres().PostgresEventSink(_dsn(config))
    return JsonlEventSink(config.events_dir)


def build_grant_store(config: WorkerConfig) -> GrantStore:
    """Where remembered grants are kept (``activities.grants``)."""
    if config.state_backend == "postgres":
        return _postgres().PostgresGrantStore(_dsn(config))
    return SqliteGrantStore(config.data_dir / "grants.db")


def build_notification_ledger(config: WorkerConfig) -> NotificationLedger:
    """What each notifier took (``notify.send`` sends a notification once per notifier)."""
    if config.state_backend == "postgres":
        return _postgres().PostgresNotificationLedger(_dsn(config))
    return SqliteNotificationLedger(config.data_dir / "notifications.db")


def build_stream_backend(config: WorkerConfig) -> StreamBackend | None:
    """The configured stream backend (None for ``stream_backend=none``). Builds only: contacts
    nothing.

    Raises:
        ConfigError: ``redis`` without its client library installed.
    """
    if config.stream_backend == "none":
        return None
    if config.stream_backend == "redis":
        assert config.stream_url is not None  # the config's validator insists
        try:
            from agent_worker.activities.stores.redis_streams import RedisStreamBackend
        except ImportError as err:
            raise ConfigError(
                f"AGENT_WORKER_STREAM_BACKEND=redis needs redis: pip install 'agent-worker[redis]' ({err})"
            ) from None
        return RedisStreamBackend(config.stream_url.get_secret_value(), config.stream_retention)
    return SqliteStreamBackend(config.stream_db, config.stream_retention)


def migrate_state(config: WorkerConfig) -> list[int]:
    """Apply the state database's missing migrations (none for the local backend); the versions
    applied now.

    Raises:
        StateUnavailable: the database cannot be reached, or refuses the tables.
    """
    if config.state_backend != "postgres":
        return []
    return _postgres().db.migrate(_dsn(config))


def check_state_stores(config: WorkerConfig) -> None:
    """Prove the state stores usable: for ``postgres``, reach the database, apply the missing
    migrations (idempotent, under an advisory lock: see ``activities.stores.postgres_db``) and read
    each store's table.

    Raises:
        SystemExit: naming the store that cannot be used, why, and what to run.
    """
    if config.state_backend != "postgres":
        return
    from agent_worker.activities.errors import StateUnavailable

    postgres = _postgres()
    dsn = _dsn(config)
    where = f"AGENT_WORKER_STATE_BACKEND=postgres at {postgres.db.describe(dsn)}"
    try:
        postgres.db.migrate(dsn)
    except StateUnavailable as err:
        stores = ", ".join(postgres.db.STORE_TABLES)
        raise SystemExit(
            f"agent-worker worker: the state stores ({stores}; {where}) cannot be used: {err}. "
            "Check AGENT_WORKER_STATE_DSN and that the database runs, then `agent-worker migrate` "
            "(with a role that may create tables)"
        ) from None
    for store, table in postgres.db.STORE_TABLES.items():
        try:
            postgres.db.run(
                dsn, "state.check", lambda conn, t=table: conn.execute(f"SELECT 1 FROM {t} LIMIT 0")
            )
        except StateUnavailable as err:
            raise SystemExit(
                f"agent-worker worker: the {store} ({where}) cannot be used: {err}. "
                "Run `agent-worker migrate` with a role that may create tables"
            ) from None


__all__ = [
    "build_admission",
    "build_authorizer",
    "build_event_sink",
    "build_grant_store",
    "build_journal",
    "build_stream_backend",
    "check_state_stores",
    "migrate_state",
]
