"""Business writes: one operation key, one effect, a receipt confirmed by lookup."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from agent_worker.schemas.authz import AuthzRequest
from agent_worker.schemas.digests import DIGEST_PATTERN, digest_bytes
from pydantic import BaseModel, Field


def operation_key(task_id: str, call_id: str, run_chain: str | None = None) -> str:
    """The operation key of a write: derived from the task id, its run chain and the action's call
    id only, so it is the same on every retry, continue-as-new and worker, and never depends on time
    or randomness. A reused task id is a new chain, so a new task: its writes get new keys (without
    ``run_chain``, for tasks started before run chains, the task id alone as before)."""
    scope = task_id if run_chain is None else f"{task_id}\x00{run_chain}"
    return "op-" + digest_bytes(f"{scope}\x00{call_id}".encode()).split(":", 1)[1][:40]


class WriteOutcome(StrEnum):
    """What the business system says about a write."""

    COMMITTED = "committed"
    REJECTED = "rejected"  # a deterministic business refusal: never retried
    UNKNOWN = "unknown"  # the response was lost: reconcile by lookup before any retry


class WriteInput(BaseModel):
    """Input of ``business.write``."""

    operation_key: str = Field(min_length=8)
    task_id: str
    tenant: str
    record_type: str
    payload: dict[str, Any]
    system: str | None = Field(default=None, description="The business system by name (None: the default).")
    authz: AuthzRequest | None = Field(
        default=None,
        description="The approval to check again right before the write, in the write's own activity: "
        "a revoked permission refuses the write (``authz_revoked``) and nothing is written.",
    )


class WriteReceipt(BaseModel):
    """The business system's answer to a write or a lookup."""

    operation_key: str
    outcome: WriteOutcome
    record_id: str | None = None
    record_type: str | None = None
    payload_digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    committed_at: datetime | None = None
    replayed: bool = Field(
        default=False, description="True when the key was already committed and nothing new ran."
    )
    detail: str = ""


class LookupInput(BaseModel):
    """Input of ``business.lookup``."""

    operation_key: str
    system: str | None = None


class LookupResult(BaseModel):
    """Output of ``business.lookup``: the receipt when the key is known."""

    operation_key: str
    found: bool
    receipt: WriteReceipt | None = None


class WriteEvidence(BaseModel):
    """A write as evidence: its receipt and whether a later lookup confirmed it."""

    call_id: str
    operation_key: str
    receipt: WriteReceipt
    system: str | None = Field(default=None, description="The business system by name (None: the default).")
    confirmed: bool | None = Field(default=None, description="True/False once looked up; None means unknown.")
    confirmed_by: str | None = Field(
        default=None,
        description="What confirmed it: 'write' (the write's own receipt, returned once its transaction "
        "committed), 'lookup' (a lookup after an unknown outcome or at completion); None: older runs, "
        "where a completion lookup always confirmed it.",
    )
    reused_from: str | None = Field(
        default=None,
        description="A fork's write answered from this task's receipt (the parent's id): the "
        "operation key and receipt are the parent's, and nothing was written again.",
    )
