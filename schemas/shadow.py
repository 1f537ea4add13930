"""Shadow runs: a candidate agent replayed on the recorded inputs of closed tasks, without effects.

``agent-worker shadow`` reads closed tasks' histories (from the cluster or exported JSON files) into
``RecordedTask``s, stores each in the artifact store, and starts one ``ShadowRun`` workflow. It runs
a ``ShadowTask`` child per recorded task (bounded concurrency), each of which runs the candidate's
turns (``shadow.turn``), compares every proposed action with the recorded ones by version, answers
matched ones from the recorded results, runs sandbox commands in a fresh sandbox of its own, and never
executes a business write. ``shadow.score`` scores the final answer; ``shadow.report`` writes the
JSON and Markdown reports.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from agent_worker.schemas.actions import ActionResult, ActionStatus, EffectClass, Operation
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.digests import DIGEST_PATTERN
from agent_worker.schemas.sandbox import SandboxSpec
from agent_worker.schemas.tasks import PolicySpec
from pydantic import BaseModel, Field, field_validator

SHADOW_RUN_WORKFLOW = "ShadowRun"
SHADOW_TASK_WORKFLOW = "ShadowTask"
DEFAULT_SHADOW_CONCURRENCY = 8
MAX_SHADOW_CONCURRENCY = 256
# A candidate that keeps proposing is stopped after this many turns (the recorded task's own
# ``max_turns`` applies first when it is lower).
MAX_SHADOW_TURNS = 50

# How a candidate's proposed action compares with the recorded ones.
SAME = "same"  # the same version as a recorded action not matched before
DIFFERENT = "different"  # no recorded action has its version

__all__ = [
    "DEFAULT_SHADOW_CONCURRENCY",
    "DIFFERENT",
    "MAX_SHADOW_CONCURRENCY",
    "MAX_SHADOW_TURNS",
    "SAME",
    "SHADOW_RUN_WORKFLOW",
    "SHADOW_TASK_WORKFLOW",
    "RecordedAction",
    "RecordedTask",
    "ShadowAction",
    "ShadowHeader",
    "ShadowReportInput",
    "ShadowReportResult",
    "ShadowRunInput",
    "ShadowRunResult",
    "ShadowScoreInput",
    "ShadowScoreResult",
    "ShadowSummary",
    "ShadowTaskInput",
    "ShadowTaskRef",
    "ShadowTaskResult",
    "ShadowTurnInput",
]


class RecordedAction(BaseModel):
    """One action a recorded task proposed, and the result its next turn received (None: the run
    recorded none, e.g. it ended first)."""

    tool: str
    effect: EffectClass
    arguments: dict[str, Any]
    operation: Operation
    version: str = Field(pattern=DIGEST_PATTERN)
    turn: int = 0
    result: ActionResult | None = None


class RecordedTask(BaseModel):
    """What a closed task was given and what it did, read from its history (stored by digest)."""

    task_id: str
    run_id: str = ""
    agent: str
    prompt: str
    tenant: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    max_turns: int | None = None
    inputs: list[ArtifactRef] = Field(default_factory=list, description="The inputs its first turn saw.")
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)
    actions: list[RecordedAction] = Field(default_factory=list)
    phase: str = ""
    final_output: str | None = None
    cost_usd: float = 0.0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    active_seconds: float = Field(default=0.0, description="Time working, as the task counted it.")
    wall_seconds: float = Field(default=0.0, description="Start to close of the run.")


class ShadowHeader(BaseModel):
    """What a ``ShadowTask`` workflow needs of its recorded task (``shadow.load``): the actions stay
    in the artifact store, read by ``shadow.turn``."""

    task_id: str
    agent: str
    prompt: str
    tenant: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    max_turns: int | None = None
    inputs: list[ArtifactRef] = Field(default_factory=list)
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)
    recorded_actions: int = 0
    phase: str = ""
    final_output: str | None = None
    cost_usd: float = 0.0
    model_calls: int = 0
    active_seconds: float = 0.0


class ShadowTaskRef(BaseModel):
    """One recorded task of a shadow run: its id and where its ``RecordedTask`` is stored."""

    task_id: str
    ref: str = Field(pattern=DIGEST_PATTERN)


class ShadowRunInput(BaseModel):
    """Input of the ``ShadowRun`` workflow."""

    candidate: str = Field(min_length=3, description="The candidate's registration, module:attribute.")
    model: str | None = Field(default=None, description="A model for the candidate instead of its own.")
    scorer: str | None = Field(default=None, description="A scorer callable, module:function.")
    tasks: list[ShadowTaskRef] = Field(default_factory=list)
    max_concurrency: int = Field(default=DEFAULT_SHADOW_CONCURRENCY, ge=1, le=MAX_SHADOW_CONCURRENCY)

    @field_validator("tasks")
    @classmethod
    def _each_task_once(cls, tasks: list[ShadowTaskRef]) -> list[ShadowTaskRef]:
        # Each task is a child workflow named by its id: a task listed twice could not start twice.
        counts = Counter(t.task_id for t in tasks)
        twice = sorted(task_id for task_id, n in counts.items() if n > 1)
        if twice:
            raise ValueError(f"tasks listed more than once: {', '.join(twice[:5])}")
        return tasks


class ShadowTaskInput(BaseModel):
    """Input of a ``ShadowTask`` workflow: one recorded task, replayed with the candidate."""

    candidate: str
    model: str | None = None
    scorer: str | None = None
    task: ShadowTaskRef


class ShadowTurnInput(BaseModel):
    """Input of ``shadow.turn``: one candidate turn, its proposals compared with the recorded ones."""

    candidate: str
    model: str | None = None
    recorded_ref: str = Field(pattern=DIGEST_PATTERN)
    shadow_id: str = Field(description="The ShadowTask's workflow id: keys the model-call journal.")
    run_chain: str | None = None
    agent: str
    turn: int = Field(ge=1)
    prompt: str
    tenant: str = "default"
    inputs: list[ArtifactRef] = Field(default_factory=list)
    conversation_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    run_state_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    current_agent: str = ""
    results: list[ActionResult] = Field(default_factory=list)
    matched: list[int] = Field(default_factory=list, description="Recorded actions matched so far, by index.")


class ShadowAction(BaseModel):
    """A candidate's proposed action, compared with the recorded ones, and what the shadow did."""

    call_id: str
    tool: str
    effect: EffectClass
    arguments: dict[str, Any]
    operation: Operation
    version: str = Field(pattern=DIGEST_PATTERN)
    turn: int = 0
    agent: str = ""
    match: Literal["same", "different"] = "different"
    recorded_index: int | None = Field(default=None, description="The recorded action it matched.")
    recorded: ActionResult | None = Field(
        default=None, description="The recorded action's result (its approval, receipt, output)."
    )
    outcome: str = Field(
        default="",
        description="What the shadow did: 'answered from the record', 'ran in the shadow sandbox', "
        "'denied by policy', 'diverged: not executed'.",
    )
    status: ActionStatus | None = None


class ShadowTurnOutput(BaseModel):
    """Output of ``shadow.turn``."""

    turn: int
    status: Literal["final", "proposed"]
    final_output: str | None = None
    actions: list[ShadowAction] = Field(default_factory=list)
    invalid: list[ActionResult] = Field(default_factory=list)
    conversation_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    run_state_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    agent: str = ""
    model: str = ""
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class ShadowScoreInput(BaseModel):
    """Input of ``shadow.score``."""

    scorer: str
    task_id: str
    prompt: str
    recorded: str | None
    candidate: str | None


class ShadowScoreResult(BaseModel):
    """Output of ``shadow.score``: the scorer's number (None when it failed, with the error)."""

    score: float | None = None
    detail: str = ""
    error: str | None = None


class ShadowTaskResult(BaseModel):
    """One recorded task, replayed: how the candidate's run compares with the original's."""

    task_id: str
    agent: str = ""
    diverged: bool = False
    same_actions: int = 0
    different_actions: int = 0
    missing_actions: int = Field(default=0, description="Recorded actions the candidate never proposed.")
    actions: list[ShadowAction] = Field(default_factory=list)
    writes_proposed: int = 0
    writes_executed: int = Field(default=0, description="Always 0: a shadow never writes.")
    final_output: str | None = None
    recorded_final_output: str | None = None
    exact_match: bool = False
    score: ShadowScoreResult | None = None
    phase: str = Field(default="completed", description="completed, or failed (with ``error``).")
    error: str | None = None
    turns: int = 0
    model_calls: int = 0
    cost_usd: float = 0.0
    active_seconds: float = 0.0
    recorded_phase: str = ""
    recorded_cost_usd: float = 0.0
    recorded_model_calls: int = 0
    recorded_active_seconds: float = 0.0


class ShadowSummary(BaseModel):
    """A shadow run in sum."""

    tasks: int = 0
    diverged: int = 0
    diverged_tasks: list[str] = Field(default_factory=list)
    failed: int = 0
    same_actions: int = 0
    different_actions: int = 0
    missing_actions: int = 0
    writes_proposed: int = 0
    writes_executed: int = 0
    exact_matches: int = 0
    scored: int = 0
    mean_score: float | None = None
    cost_usd: float = 0.0
    recorded_cost_usd: float = 0.0
    active_seconds: float = 0.0
    recorded_active_seconds: float = 0.0


class ShadowReportInput(BaseModel):
    """Input of ``shadow.report``."""

    shadow_id: str
    candidate: str
    model: str | None = None
    scorer: str | None = None
    results: list[ShadowTaskRef] = Field(
        default_factory=list, description="Each replayed task's ``ShadowTaskResult``, stored by digest."
    )
    failed: dict[str, str] = Field(default_factory=dict, description="Tasks whose replay failed: why.")


class ShadowReportResult(BaseModel):
    """Output of ``shadow.report``: the summary and where the reports are stored."""

    summary: ShadowSummary
    json_ref: str = Field(pattern=DIGEST_PATTERN)
    markdown_ref: str = Field(pattern=DIGEST_PATTERN)


class ShadowRunResult(BaseModel):
    """Result of the ``ShadowRun`` workflow."""

    shadow_id: str
    candidate: str
    summary: ShadowSummary
    json_ref: str = Field(pattern=DIGEST_PATTERN)
    markdown_ref: str = Field(pattern=DIGEST_PATTERN)
