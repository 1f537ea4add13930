"""The three business backends the exactly-once tests run against, each with a way to inspect what
was committed and (where the system is real) to take it down and bring it back."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from agent_worker.activities.business.base import BusinessWriter
from agent_worker.activities.business.http import HttpBusinessWriter
from agent_worker.activities.business.postgres import PostgresBusinessStore
from agent_worker.activities.business.sqlite import SqliteBusinessStore
from agent_worker.examples.business_service.server import BusinessService

from tests.helpers.postgres_server import PostgresServer

BACKENDS = ["sqlite", "postgres", "http"]


@dataclass
class Backend:
    """One backend for one test: its worker settings, a writer and a view of its records."""

    name: str
    settings: dict[str, Any]
    writer: BusinessWriter
    store: Any  # count(key=None) and payload(key)
    service: BusinessService | None = None
    postgres: PostgresServer | None = None
    closers: list[Any] = field(default_factory=list)

    @property
    def can_go_down(self) -> bool:
        """Whether the system is a separate server that a test can really stop and start."""
        return self.name != "sqlite"

    def down(self) -> None:
        if self.service is not None:
            self.service.stop()
        elif self.postgres is not None:
            self.postgres.stop()

    def up(self) -> None:
        if self.service is not None:
            self.service.start()
        elif self.postgres is not None:
            self.postgres.start()


@contextlib.contextmanager
def open_backend(name: str, data_dir: Path, postgres: PostgresServer | None) -> Iterator[Backend]:
    """A fresh, empty backend called ``name`` (its own SQLite file, PostgreSQL database or service)."""
    if name == "sqlite":
        store = SqliteBusinessStore(data_dir / "business.db")
        yield Backend(name, {"business_backend": "sqlite"}, store, store)
    elif name == "postgres":
        assert postgres is not None
        database = f"biz_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres.dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database}")
        dsn = postgres.dsn_for(database)
        store = PostgresBusinessStore(dsn)
        try:
            yield Backend(
                name, {"business_backend": "postgres", "business_dsn": dsn}, store, store, postgres=postgres
            )
        finally:
            store.close()
            if not postgres_running(postgres):
                postgres.start()
    else:
        service = BusinessService(data_dir / "service.db", faults_enabled=True).start()
        try:
            yield Backend(
                name,
                {"business_backend": "http", "business_url": service.url},
                HttpBusinessWriter(service.url),
                service,
                service=service,
            )
        finally:
            service.stop()


def postgres_running(server: PostgresServer) -> bool:
    try:
        with psycopg.connect(server.dsn_for("postgres"), connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False
