"""Agent memory across tasks: facts an agent remembered, recalled by text in later tasks.

A fact is written by the built-in ``remember`` tool as a business write to the system named
``memory`` (``MEMORY_SYSTEM``): it goes through policy, gets the operation key every write gets (task
run chain + call id) and lands in the task's evidence, so a repeat (a retried activity, a worker
killed mid-write) stores it once. The memory stores here are the business stores with one more
method, ``recall``, and their own table:

- ``SqliteMemoryStore``: ``<data_dir>/memory.db`` (``state_backend=local``);
- ``PostgresMemoryStore``: table ``agent_worker_memory`` in ``state_dsn`` (``state_backend=postgres``).

A fact's scope is its tenant (the ``WriteInput.tenant`` the workflow sets, never the model) and its
agent (the name the registration's tools were built for, ``payload.agent``). ``recall`` matches the
query's words (case-insensitive substring match of each word, at most ``MAX_QUERY_WORDS``), ranks
facts by how many words they contain, then newest first, and returns at most ``MAX_RECALL_COUNT``
facts and ``MAX_RECALL_CHARS`` characters in all. A fact over ``MAX_FACT_CHARS`` is refused.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from agent_worker.activities.business.postgres import PostgresBusinessStore
from agent_worker.activities.business.sqlite import SqliteBusinessStore
from agent_worker.activities.errors import WriteUnavailable

MEMORY_SYSTEM = "memory"
MEMORY_RECORD_TYPE = "memory.fact"
MAX_FACT_CHARS = 2_000
MAX_RECALL_COUNT = 5
MAX_RECALL_CHARS = 6_000
MAX_QUERY_WORDS = 8
# Facts of one agent read per recall before ranking; older ones beyond this are not searched.
_CANDIDATES = 500
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Fact:
    """One remembered fact, as ``recall`` returns it."""

    fact: str
    task_id: str
    committed_at: str


def query_words(query: str) -> list[str]:
    """The lower-case words of ``query`` that ``recall`` matches (at most ``MAX_QUERY_WORDS``)."""
    words = [w.lower() for w in _WORD.findall(query) if len(w) > 1]
    return list(dict.fromkeys(words))[:MAX_QUERY_WORDS]


def rank(rows: list[tuple[str, str, str]], query: str, limit: int = MAX_RECALL_COUNT) -> list[Fact]:
    """The best matches among ``rows`` (payload JSON, task id, committed at; newest first), bounded
    by ``limit`` and ``MAX_RECALL_CHARS``. An empty query returns the newest facts."""
    words = query_words(query)
    scored: list[tuple[int, int, Fact]] = []
    for order, (payload_json, task_id, committed_at) in enumerate(rows):
        fact = str(json.loads(payload_json).get("fact", ""))
        text = fact.lower()
        score = sum(1 for w in words if w in text)
        if words and score == 0:
            continue
        scored.append((-score, order, Fact(fact, task_id, str(committed_at))))
    scored.sort(key=lambda item: (item[0], item[1]))
    found: list[Fact] = []
    total = 0
    for _, _, fact in scored[: max(0, min(limit, MAX_RECALL_COUNT))]:
        if total + len(fact.fact) > MAX_RECALL_CHARS:
            break
        found.append(fact)
        total += len(fact.fact)
    return found


class SqliteMemoryStore(SqliteBusinessStore):
    """Facts in one SQLite file (the business store's table and exactly-once semantics)."""

    def recall(self, tenant: str, agent: str, query: str, limit: int = MAX_RECALL_COUNT) -> list[Fact]:
        """The facts of ``agent`` in ``tenant`` best matching ``query`` (see the module docstring).

        Raises:
            WriteUnavailable: the file cannot be read (the read tool reports it to the model).
        """
        try:
            db = self._connect()
            try:
                rows = db.execute(
                    "SELECT payload_json, task_id, committed_at FROM business_records "
                    "WHERE tenant = ? AND record_type = ? AND json_extract(payload_json, '$.agent') = ? "
                    "ORDER BY committed_at DESC LIMIT ?",
                    (tenant, MEMORY_RECORD_TYPE, agent, _CANDIDATES),
                ).fetchall()
            finally:
                db.close()
        except sqlite3.Error as err:
            raise WriteUnavailable(f"memory unavailable: {err}", operation="memory.recall") from err
        return rank(rows, query, limit)


class PostgresMemoryStore(PostgresBusinessStore):
    """Facts in a PostgreSQL table (default ``agent_worker_memory``) every worker shares."""

    def __init__(self, dsn: str, *, table: str = "agent_worker_memory", **kwargs: Any) -> None:
        super().__init__(dsn, table=table, **kwargs)

    def recall(self, tenant: str, agent: str, query: str, limit: int = MAX_RECALL_COUNT) -> list[Fact]:
        """The facts of ``agent`` in ``tenant`` best matching ``query`` (see the module docstring).

        Raises:
            WriteUnavailable: the database cannot be read.
        """
        try:
            with self._connect() as conn:
                rows = conn.execute(
                    self._sql(
                        "SELECT payload_json, task_id, committed_at::text FROM {table} "
                        "WHERE tenant = %s AND record_type = %s AND payload_json::jsonb->>'agent' = %s "
                        "ORDER BY committed_at DESC LIMIT %s"
                    ),
                    (tenant, MEMORY_RECORD_TYPE, agent, _CANDIDATES),
                ).fetchall()
        except self._pg.Error as err:
            raise WriteUnavailable(f"memory unavailable: {err}", operation="memory.recall") from err
        return rank([tuple(r) for r in rows], query, limit)


MemoryStore = SqliteMemoryStore | PostgresMemoryStore


def build_memory_store(config: Any) -> MemoryStore:
    """The memory store of ``config``'s state backend: PostgreSQL (``state_dsn``) for
    ``state_backend=postgres``, else ``<data_dir>/memory.db``."""
    if getattr(config, "state_backend", "local") == "postgres" and config.state_dsn is not None:
        return PostgresMemoryStore(config.state_dsn.get_secret_value())
    return SqliteMemoryStore(config.data_dir / "memory.db")


__all__ = [
    "MAX_FACT_CHARS",
    "MAX_RECALL_CHARS",
    "MAX_RECALL_COUNT",
    "MEMORY_RECORD_TYPE",
    "MEMORY_SYSTEM",
    "Fact",
    "MemoryStore",
    "PostgresMemoryStore",
    "SqliteMemoryStore",
    "build_memory_store",
    "rank",
]
