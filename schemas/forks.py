"""Forks: a new task that begins with another task's state at one of its steps (docs/forks.md).

A *step* is one agent turn of the original task, numbered from 1 as its ``turn.started`` events
are. Forking at step ``N`` starts a task whose first turn is turn ``N``: it sees the conversation the
original's turn ``N`` saw (with the results of the actions of turn ``N - 1``), the original's
artifacts by digest, what the original had spent, and a fresh sandbox rebuilt by running again the
commands the original ran before step ``N``. The original's committed business writes are never
repeated: the same operation proposed again is answered from the original's receipt.

``ForkSpec`` travels in ``TaskSpec.fork``; ``fork.prepare`` answers a ``ForkStart`` that the fork's
workflow takes into its state (``ForkState``).
"""

from __future__ import annotations

from typing import Any

from agent_worker.schemas.actions import ActionResult, ProposedAction
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.digests import DIGEST_PATTERN, digest_json
from agent_worker.schemas.writes import WriteReceipt
from pydantic import BaseModel, ConfigDict, Field

# Steps of one task the step list reads (a task longer than this is cut, and says so).
MAX_STEPS = 10_000


class ForkSpec(BaseModel):
    """Where a fork comes from (``TaskSpec.fork``); set by ``agent-worker fork``, the client and the API."""

    model_config = ConfigDict(extra="forbid")

    parent: str = Field(min_length=1, max_length=200, description="The original task's id.")
    at: int = Field(ge=1, le=MAX_STEPS, description="The step (turn) the fork's first turn is.")
    replay_until: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STEPS,
        description="Steps before this one are answered from the original's recorded turns (its "
        "model-call answers), not by the model; None: every step of the fork runs live.",
    )
    changed: list[str] = Field(
        default_factory=list,
        description="What the fork changes, for people: 'prompt', 'agent', 'model' (the spec holds "
        "the change).",
    )
    history: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="The original's exported history (one run, as `temporal workflow show -o json` "
        "writes it), by digest in the artifact store: the fork reads the original from it instead of "
        "the cluster (`agent-worker fork --history FILE`). None: from the cluster.",
    )


class ParentWrite(BaseModel):
    """A business write the original committed before the fork point."""

    operation_key: str
    operation: str = Field(pattern=DIGEST_PATTERN, description="Digest of (record type, system, payload).")
    receipt: WriteReceipt
    system: str | None = None


class ReplayCommand(BaseModel):
    """A sandbox command the original ran before the fork point, to run again in the fork's sandbox."""

    action: ProposedAction
    sandbox_id: str = Field(description="The original's sandbox it ran in (never used by the fork).")


class ForkStart(BaseModel):
    """What ``fork.prepare`` answers: the original's state at the step."""

    parent: str
    parent_run_chain: str | None = None
    at: int
    turn: int = Field(description="The fork's turn counter before its first turn (``at - 1``).")
    conversation_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    run_state_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    results: list[ActionResult] = Field(default_factory=list)
    follow_ups: list[str] = Field(default_factory=list)
    current_agent: str = ""
    mcp_catalog_ref: str | None = None
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    usage: dict[str, Any] = Field(default_factory=dict, description="``Usage`` fields spent before the step.")
    commands: list[ReplayCommand] = Field(default_factory=list)
    writes: list[ParentWrite] = Field(default_factory=list)
    recorded_turns: list[dict[str, Any]] = Field(
        default_factory=list, description="The original's ``TurnResult``s from ``at`` to ``replay_until``."
    )
    prompt_replaced: bool = False


class PrepareForkInput(BaseModel):
    """Input of ``fork.prepare``."""

    task_id: str
    fork: ForkSpec
    prompt: str = Field(
        description="The fork's prompt (a changed one replaces the original's in its conversation)."
    )
    agent: str = Field(
        default="",
        description="The fork's agent (another one starts from the conversation, not the RunState).",
    )


class ForkState(BaseModel):
    """What a fork carries in its state (``TaskState.fork``), across continue-as-new."""

    parent: str
    at: int
    writes: list[ParentWrite] = Field(default_factory=list)
    reused: list[str] = Field(default_factory=list, description="Operation keys answered from the original.")
    replayed_commands: int = 0
    recorded_turns: list[dict[str, Any]] = Field(default_factory=list)

    def origin(self) -> ForkOrigin:
        """The fork's parent as its evidence and status name it."""
        return ForkOrigin(
            parent=self.parent,
            at=self.at,
            reused_receipts=list(self.reused),
            replayed_commands=self.replayed_commands,
        )


class ForkOrigin(BaseModel):
    """A fork's parent, as its evidence and status name it."""

    parent: str
    at: int
    reused_receipts: list[str] = Field(
        default_factory=list,
        description="The original's operation keys the fork's writes were answered from.",
    )
    replayed_commands: int = Field(
        default=0, description="The original's commands run again in the fork's sandbox."
    )


class StepRecord(BaseModel):
    """One step (turn) of a task, as ``agent-worker steps`` lists it."""

    step: int
    run_id: str = ""
    proposed: list[str] = Field(default_factory=list, description="Tools the turn proposed (call ids).")
    status: str = Field(default="", description="'final', 'proposed', or 'failed' / 'running'.")
    commands: list[str] = Field(
        default_factory=list, description="Commands run after the turn (argv joined)."
    )
    writes: list[str] = Field(
        default_factory=list, description="Writes committed after the turn (operation keys)."
    )
    cost_usd: float = 0.0
    model_calls: int = 0


def write_operation(record_type: str, system: str | None, payload: dict[str, Any]) -> str:
    """The digest that names a write's effect: same record type, system and payload, same operation."""
    return digest_json({"record_type": record_type, "system": system, "payload": payload})


__all__ = [
    "MAX_STEPS",
    "ForkOrigin",
    "ForkSpec",
    "ForkStart",
    "ForkState",
    "ParentWrite",
    "PrepareForkInput",
    "ReplayCommand",
    "StepRecord",
    "write_operation",
]
