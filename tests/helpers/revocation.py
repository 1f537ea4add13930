"""A permission revoked between an approval and the write's own check, on cue.

The write re-checks its approval inside its activity, a few milliseconds after the approval lands:
too short a window for a test to revoke in by timing. ``GatedAuthorizer`` (the default SQLite
revocation list) holds each check until the test opens the gate, so ``approve_then_revoke`` revokes
exactly there, however fast or slow the machine. The ``revocable_env`` fixture runs a worker with it.
"""

from __future__ import annotations

import time
from typing import Any

from agent_worker.activities.authz import SqliteAuthorizer
from agent_worker.schemas.authz import AuthzDecision, AuthzRequest
from agent_worker.schemas.config import WorkerConfig
from agent_worker.workflows import AgentTaskWorkflow

from tests.helpers.support import TaskEnv, decision, until

CHECKING = "authz-checking"  # in the data dir: a write's check has begun
GATE = "authz-gate"  # in the data dir: checks may read the revocation list
REASON = "left the finance team"


class GatedAuthorizer(SqliteAuthorizer):
    """The default authorizer, each check held until the gate is open (30 s at most)."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__(config.authz_db)
        self.data_dir = config.data_dir

    def check(self, request: AuthzRequest) -> AuthzDecision:
        (self.data_dir / CHECKING).touch()
        deadline = time.monotonic() + 30
        while not (self.data_dir / GATE).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return super().check(request)


def gated(config: WorkerConfig) -> WorkerConfig:
    """``config`` with the gated authorizer."""
    return config.model_copy(update={"authorizer": f"{__name__}:{GatedAuthorizer.__name__}"})


def approved_write(on_revoked: str) -> dict[str, Any]:
    """A task whose agent proposes one write needing the approval of a clerk or a supervisor."""
    return {
        "agent": "recorder",
        "prompt": "record: paid-invoice-17",
        "policy": {
            "rules": [
                {"tool": "record_value", "decision": "require_approval", "approvers": ["clerk", "supervisor"]}
            ],
            "on_revoked": on_revoked,
        },
    }


async def approve_then_revoke(env: TaskEnv, handle: Any, principal: str) -> None:
    """``principal`` approves the pending request; once the write has begun and before it reads the
    permission, the permission is revoked (reason ``REASON``), and the check goes on."""
    [request] = (await env.awaiting_approval(handle)).pending
    await handle.execute_update(AgentTaskWorkflow.decide, decision(request, "approve", principal))
    data = env.config.data_dir
    await until((data / CHECKING).exists, within=30, what="the write's authorization check")
    assert env.business().count() == 0
    SqliteAuthorizer(env.config.authz_db).revoke(principal, "record_value", reason=REASON)
    (data / GATE).touch()
