"""An agent with an own effect tool: an existing async function that books an invoice in a ledger (a
SQLite file standing for a billing system), declared with ``effect_tool`` and a lookup by key.

The ledger's path comes from ``AW_LEDGER``. Faults, for crash tests: with ``AW_LEDGER_FAULT=kill``
the first call commits its row and then kills its own worker process (SIGKILL) before the activity
can complete (a mark in ``AW_LEDGER_MARKS`` makes it happen once); with ``fail`` every call raises
before it commits anything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

from agent_worker.activities.business import SqliteBusinessStore
from agent_worker.schemas.config import WorkerConfig

from agent_worker import Agent, AgentRegistration, BusinessWrite, ToolError, effect_tool, write_tool
from agent_worker.testing import Script


def _ledger() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ["AW_LEDGER"], timeout=30)
    db.execute(
        "CREATE TABLE IF NOT EXISTS invoices "
        "(request_key TEXT, customer TEXT, amount_cents INTEGER, id INTEGER PRIMARY KEY)"
    )
    return db


def invoices(path: Path) -> list[tuple[str, str, int]]:
    """Every row of the ledger at ``path``: (key, customer, amount)."""
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        return db.execute("SELECT request_key, customer, amount_cents FROM invoices ORDER BY id").fetchall()


async def find_invoice(request_key: str) -> dict[str, Any] | None:
    """The invoice booked under ``request_key``, or None."""
    with _ledger() as db:
        row = db.execute(
            "SELECT id, customer, amount_cents FROM invoices WHERE request_key = ?", (request_key,)
        ).fetchone()
    return None if row is None else {"invoice": row[0], "customer": row[1], "amount_cents": row[2]}


async def _book(customer: str, amount_cents: int, request_key: str) -> dict[str, Any]:
    """The billing system's own call: it books every call it gets (no idempotency of its own)."""
    await asyncio.sleep(0)
    fault = os.environ.get("AW_LEDGER_FAULT", "")
    if fault == "fail":
        raise ConnectionError("billing is down")
    if amount_cents <= 0:
        raise ToolError(f"amount_cents must be positive, got {amount_cents}")
    with _ledger() as db:
        cursor = db.execute(
            "INSERT INTO invoices (request_key, customer, amount_cents) VALUES (?, ?, ?)",
            (request_key, customer, amount_cents),
        )
        invoice = cursor.lastrowid
    mark = Path(os.environ.get("AW_LEDGER_MARKS", "/nonexistent")) / "killed"
    if fault == "kill" and not mark.exists():
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
        os.kill(os.getpid(), signal.SIGKILL)  # committed; the activity never completes
    return {"invoice": invoice, "customer": customer, "amount_cents": amount_cents}


@effect_tool(system="billing", key_parameter="request_key", lookup=find_invoice, max_attempts=3)
async def create_invoice(customer: str, amount_cents: int, request_key: str) -> dict[str, Any]:
    """Book an invoice for a customer.

    Args:
        customer: The customer's name.
        amount_cents: The amount, in cents.
    """
    return await _book(customer, amount_cents, request_key)


def archive_store(config: WorkerConfig) -> SqliteBusinessStore:
    """A second business system, registered by name ("archive"): its own SQLite file."""
    return SqliteBusinessStore(config.data_dir / "archive.db")


@write_tool
def archive_value(value: str) -> BusinessWrite:
    """Archive a value in the archive system.

    Args:
        value: The value.
    """
    return BusinessWrite(record_type="archived", payload={"value": value}, system="archive")


registrations = [
    AgentRegistration(
        name="archiver",
        build=lambda: Agent(name="archiver", instructions="Archive values.", tools=[archive_value]),
        scripted_model=lambda: Script(("archive_value", {"value": "v1"}), "Archived."),
    ),
    AgentRegistration(
        name="invoicer",
        build=lambda: Agent(name="invoicer", instructions="Book invoices.", tools=[create_invoice]),
        scripted_model=lambda: Script(
            ("create_invoice", {"customer": "acme", "amount_cents": 1200}), "Booked."
        ),
    ),
    AgentRegistration(
        name="bad-invoicer",
        build=lambda: Agent(name="bad-invoicer", instructions="Book invoices.", tools=[create_invoice]),
        scripted_model=lambda: Script(("create_invoice", {"customer": "acme", "amount_cents": -5}), "Done."),
    ),
]
