"""Per-tenant caps on running tasks: the ``tenants.admit`` and ``tenants.release`` activities.

A tenant that floods the system gets at most its cap of tasks running; the rest are refused at
start (recorded, explained), so other tenants' tasks keep their pace. Caps come from the worker's
configuration (``AGENT_WORKER_TENANT_CAPS=acme=5,*=100``; ``*`` is every other tenant; no entry, no
cap). The running set is a SQLite table in the data dir, shared by the workers of one host (a fleet
uses ``activities.stores.postgres.PostgresAdmission``: ``state_backend=postgres``). An entry
whose task has ended without releasing (terminated from outside) is dropped the next time its
tenant looks full, after asking Temporal. Entries carry the task's run chain: a reused task id (a new
chain) takes the place of an earlier run's entry, under its own tenant's cap, rather than inheriting
it; an entry of a chain other than the running one is an ended task's.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from agent_worker.activities.errors import activity_boundary
from agent_worker.schemas.tenants import AdmitInput, AdmitResult, ReleaseInput
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

_SCHEMA = """
CREATE TABLE IF NOT EXISTS running (
    task_id     TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    admitted_at TEXT NOT NULL
)
"""
# Each entry's run chain, beside the table (workers of the earlier code keep writing ``running`` as
# they did); entries of tasks started before run chains have none.
_CHAINS = """
CREATE TABLE IF NOT EXISTS running_chain (
    task_id   TEXT PRIMARY KEY,
    run_chain TEXT NOT NULL
)
"""
_ENTRIES = "SELECT r.task_id, c.run_chain FROM running r LEFT JOIN running_chain c ON c.task_id = r.task_id"


class TenantAdmission:
    """Admits tasks up to each tenant's cap."""

    def __init__(self, path: Path, caps: Mapping[str, int], client: Client) -> None:
        self.path = Path(path)
        self.caps = dict(caps)
        self.client = client
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(_SCHEMA)
            db.execute(_CHAINS)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def cap_for(self, tenant: str) -> int | None:
        return self.caps.get(tenant, self.caps.get("*"))

    def _try_admit(
        self, task_id: str, tenant: str, cap: int, chain: str | None
    ) -> tuple[bool, int, list[tuple[str, str | None]]]:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            held = db.execute(f"{_ENTRIES} WHERE r.task_id = ?", (task_id,)).fetchone()
            if held is not None and held[1] == chain:
                db.execute("COMMIT")
                return True, 0, []  # already admitted (a retried attempt)
            if held is not None:
                # An earlier run of a reused task id ended without releasing (only one run of an id
                # is ever open): its place is free, and this run queues under its own tenant's cap.
                db.execute("DELETE FROM running WHERE task_id = ?", (task_id,))
            db.execute("DELETE FROM running_chain WHERE task_id = ?", (task_id,))
            others = list(db.execute(f"{_ENTRIES} WHERE r.tenant = ?", (tenant,)))
            if len(others) >= cap:
                db.execute("COMMIT")
                return False, len(others), others
            db.execute(
                "INSERT INTO running VALUES (?, ?, ?)", (task_id, tenant, datetime.now(UTC).isoformat())
            )
            if chain is not None:
                db.execute("INSERT INTO running_chain VALUES (?, ?)", (task_id, chain))
            db.execute("COMMIT")
            return True, len(others) + 1, []
        finally:
            db.close()

    async def admit(self, task_id: str, tenant: str, chain: str | None = None) -> AdmitResult:
        cap = self.cap_for(tenant)
        if cap is None:
            return AdmitResult(admitted=True, running=0)
        admitted, running, others = await asyncio.to_thread(self._try_admit, task_id, tenant, cap, chain)
        if not admitted and await self._drop_ended(others):
            admitted, running, _ = await asyncio.to_thread(self._try_admit, task_id, tenant, cap, chain)
        if admitted:
            return AdmitResult(admitted=True, running=running, cap=cap)
        return AdmitResult(
            admitted=False,
            running=running,
            cap=cap,
            reason=f"tenant {tenant!r} already runs {running} tasks, its cap is {cap}",
        )

    async def _drop_ended(self, entries: list[tuple[str, str | None]]) -> bool:
        """Drop the entries whose run has ended: the task is not running, or what runs under its id
        is another run chain (a reused id). Whether any was dropped."""
        ended = []
        for task_id, chain in entries:
            try:
                description = await self.client.get_workflow_handle(task_id).describe()
            except RPCError as err:
                if err.status is not RPCStatusCode.NOT_FOUND:
                    raise
                description = None
            running = description is not None and description.status is WorkflowExecutionStatus.RUNNING
            if running and chain is not None and description is not None:
                running = description.raw_description.workflow_execution_info.first_run_id == chain
            if not running:
                ended.append((task_id, chain))
        for task_id, chain in ended:
            await asyncio.to_thread(self.release, task_id, chain)
        return bool(ended)

    def release(self, task_id: str, chain: str | None = None) -> None:
        """Free the task's place (only its own run chain's, when it has one)."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            held = db.execute(f"{_ENTRIES} WHERE r.task_id = ?", (task_id,)).fetchone()
            if held is not None and (chain is None or held[1] == chain):
                db.execute("DELETE FROM running WHERE task_id = ?", (task_id,))
                db.execute("DELETE FROM running_chain WHERE task_id = ?", (task_id,))
            db.execute("COMMIT")
        finally:
            db.close()


class TenantActivities:
    """``tenants.admit`` and ``tenants.release``."""

    def __init__(self, admission: TenantAdmission, colocated: list[str] | None = None) -> None:
        self.admission = admission
        self.colocated = colocated or []

    @activity.defn(name="tenants.admit")
    @activity_boundary
    async def admit(self, input: AdmitInput) -> AdmitResult:
        """Admit the task if its tenant is under its cap (idempotent per task), and say which roles'
        work this worker also serves on the task queue (``colocated``)."""
        answer = await self.admission.admit(input.task_id, input.tenant, input.run_chain)
        return answer.model_copy(update={"colocated": self.colocated})

    @activity.defn(name="tenants.release")
    @activity_boundary
    async def release(self, input: ReleaseInput) -> None:
        """Free the task's place (idempotent)."""
        await asyncio.to_thread(self.admission.release, input.task_id)
