"""Per-tenant caps on running tasks: the ``tenants.admit`` and ``tenants.release`` activities.

A tenant that floods the system gets at most its cap of tasks running; the rest are refused at
start (recorded, explained), so other tenants' tasks keep their pace. Caps come from the worker's
configuration (``AGENT_WORKER_TENANT_CAPS=acme=5,*=100``; ``*`` is every other tenant; no entry, no
cap). The running set is a SQLite table in the data dir, shared by the workers of one host. An entry
whose task has ended without releasing (terminated from outside) is dropped the next time its
tenant looks full, after asking Temporal.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.errors import activity_boundary
from schemas.tenants import AdmitInput, AdmitResult, ReleaseInput

_SCHEMA = """
CREATE TABLE IF NOT EXISTS running (
    task_id     TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    admitted_at TEXT NOT NULL
)
"""


class TenantAdmission:
    """Admits tasks up to each tenant's cap."""

    def __init__(self, path: Path, caps: Mapping[str, int], client: Client) -> None:
        self.path = Path(path)
        self.caps = dict(caps)
        self.client = client
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def cap_for(self, tenant: str) -> int | None:
        return self.caps.get(tenant, self.caps.get("*"))

    def _try_admit(self, task_id: str, tenant: str, cap: int) -> tuple[bool, int, list[str]]:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            if db.execute("SELECT 1 FROM running WHERE task_id = ?", (task_id,)).fetchone():
                db.execute("COMMIT")
                return True, 0, []  # already admitted (a retried attempt)
            others = [r[0] for r in db.execute("SELECT task_id FROM running WHERE tenant = ?", (tenant,))]
            if len(others) >= cap:
                db.execute("COMMIT")
                return False, len(others), others
            db.execute(
                "INSERT INTO running VALUES (?, ?, ?)", (task_id, tenant, datetime.now(UTC).isoformat())
            )
            db.execute("COMMIT")
            return True, len(others) + 1, []
        finally:
            db.close()

    async def admit(self, task_id: str, tenant: str) -> AdmitResult:
        cap = self.cap_for(tenant)
        if cap is None:
            return AdmitResult(admitted=True, running=0)
        admitted, running, others = await asyncio.to_thread(self._try_admit, task_id, tenant, cap)
        if not admitted and await self._drop_ended(others):
            admitted, running, _ = await asyncio.to_thread(self._try_admit, task_id, tenant, cap)
        if admitted:
            return AdmitResult(admitted=True, running=running, cap=cap)
        return AdmitResult(
            admitted=False,
            running=running,
            cap=cap,
            reason=f"tenant {tenant!r} already runs {running} tasks, its cap is {cap}",
        )

    async def _drop_ended(self, task_ids: list[str]) -> bool:
        ended = []
        for task_id in task_ids:
            try:
                status = (await self.client.get_workflow_handle(task_id).describe()).status
            except RPCError as err:
                if err.status is not RPCStatusCode.NOT_FOUND:
                    raise
                status = None
            if status is not WorkflowExecutionStatus.RUNNING:
                ended.append(task_id)
        for task_id in ended:
            await asyncio.to_thread(self.release, task_id)
        return bool(ended)

    def release(self, task_id: str) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM running WHERE task_id = ?", (task_id,))


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
        answer = await self.admission.admit(input.task_id, input.tenant)
        return answer.model_copy(update={"colocated": self.colocated})

    @activity.defn(name="tenants.release")
    @activity_boundary
    async def release(self, input: ReleaseInput) -> None:
        """Free the task's place (idempotent)."""
        await asyncio.to_thread(self.admission.release, input.task_id)
