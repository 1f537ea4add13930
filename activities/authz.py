"""Re-authorization right before an approved action runs: the ``authz.check`` activity.

An approval given on Monday must not authorize a write after the approver's rights were revoked on
Tuesday. The workflow asks the authorizer again, for the approving principal and the exact action
version, immediately before the effect; a revoked permission blocks it.

``Authorizer`` is the interface to plug a real system in (``AGENT_WORKER_AUTHORIZER=module:factory``).
The default, ``SqliteAuthorizer``, keeps a revocation list in the data dir: a principal holds every
permission the task's policy gives it until it is revoked, for one tool or for all
(``agent-worker revoke finance-lead --tool submit_report``; ``agent-worker grant`` lifts it). A fleet
keeps the list in PostgreSQL (``state_backend=postgres``: ``activities.stores.postgres``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from agent_worker.activities.errors import activity_boundary
from agent_worker.schemas.authz import AuthzDecision, AuthzRequest
from temporalio import activity

ALL_TOOLS = "*"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS revocations (
    principal  TEXT NOT NULL,
    tool       TEXT NOT NULL,
    reason     TEXT NOT NULL,
    revoked_at TEXT NOT NULL,
    PRIMARY KEY (principal, tool)
)
"""


class Authorizer(Protocol):
    """Answers whether a principal may (still) approve an action."""

    def check(self, request: AuthzRequest) -> AuthzDecision:
        """Allowed or not, with the reason."""
        ...


class SqliteAuthorizer:
    """A revocation list in SQLite: everything the policy grants is allowed unless revoked."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def check(self, request: AuthzRequest) -> AuthzDecision:
        with self._connect() as db:
            row = db.execute(
                "SELECT tool, reason, revoked_at FROM revocations WHERE principal = ? AND tool IN (?, ?)",
                (request.principal, request.tool, ALL_TOOLS),
            ).fetchone()
        if row is None:
            return AuthzDecision(allowed=True, reason="not revoked")
        scope = "every tool" if row[0] == ALL_TOOLS else row[0]
        return AuthzDecision(
            allowed=False,
            reason=f"{request.principal}'s permission for {scope} was revoked at {row[2]}: {row[1]}",
        )

    def revoke(self, principal: str, tool: str = ALL_TOOLS, reason: str = "revoked") -> None:
        """Revoke ``principal``'s permission for ``tool`` (or every tool)."""
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO revocations VALUES (?, ?, ?, ?)",
                (principal, tool, reason, datetime.now(UTC).isoformat()),
            )

    def grant(self, principal: str, tool: str = ALL_TOOLS) -> bool:
        """Lift a revocation; whether there was one."""
        with self._connect() as db:
            return (
                db.execute(
                    "DELETE FROM revocations WHERE principal = ? AND tool = ?", (principal, tool)
                ).rowcount
                > 0
            )


class AuthzActivities:
    """``authz.check`` over one authorizer."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    @activity.defn(name="authz.check")
    @activity_boundary
    async def check(self, request: AuthzRequest) -> AuthzDecision:
        """Whether the approving principal still holds the permission for this action version."""
        return await asyncio.to_thread(self.authorizer.check, request)
