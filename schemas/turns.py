"""Agent-kernel turn contracts.

A turn runs the OpenAI Agents SDK until the agent finishes or proposes effectful calls. The SDK's
``RunState`` stays in the artifact store; history carries only its digest.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from agent_worker.schemas.actions import ActionResult, Operation, ProposedAction
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.digests import DIGEST_PATTERN
from agent_worker.schemas.grants import GrantQuery
from pydantic import BaseModel, Field


class TurnInput(BaseModel):
    """Input of ``agent.turn``."""

    # Written without its defaults (``schemas.payloads``): an activity's own payload, once a step.
    compact_payload: ClassVar[bool] = True

    task_id: str
    agent: str
    turn: int = Field(ge=1)
    prompt: str = Field(
        description="The task's prompt; empty for a turn that continues a run or a conversation."
    )
    inputs: list[ArtifactRef] = Field(default_factory=list)
    run_state_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    results: list[ActionResult] = Field(default_factory=list)
    conversation_ref: str | None = Field(
        default=None, pattern=DIGEST_PATTERN, description="A finished conversation to continue."
    )
    follow_ups: list[str] = Field(default_factory=list, description="User input added since the last turn.")
    run_chain: str | None = Field(
        default=None,
        description="The task's run chain, keying the model-call journal (None: by task id alone).",
    )
    mcp_catalog_ref: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="The agent's MCP tools as the task first listed them (None: list them now).",
    )
    tenant: str = Field(
        default="", description="The task's tenant: the scope of the agent's memory (empty: older runs)."
    )
    current_agent: str = Field(
        default="",
        description="The SDK agent the task's run is on (after a handoff, the specialist): a turn "
        "that starts from the conversation rather than the RunState starts on it (empty: the start agent).",
    )
    grants: GrantQuery | None = Field(
        default=None,
        description="The task's side of a remembered-grant lookup for the actions the turn proposes "
        "(None: its policy allows no grants).",
    )
    model: str | None = Field(
        default=None,
        description="The model the task names for its agent instead of the registration's "
        "(``TaskSpec.model``; None: the registration's).",
    )


class SkippedModel(BaseModel):
    """A model of an agent's fallback chain that did not answer a call, and why."""

    model: str
    provider: str = ""
    reason: str = Field(default="", description="'outage: ...' or 'quota: ...', with the provider's words.")


class ModelCall(BaseModel):
    """Which model answered one model call of a turn."""

    model: str = ""
    provider: str = ""
    api: str = Field(default="", description="responses, chat_completions, litellm, scripted or custom.")
    replayed: bool = Field(default=False, description="Answered from the journal after a retry.")
    skipped: list[SkippedModel] = Field(
        default_factory=list, description="Earlier models of the fallback chain, passed over."
    )


# A turn's call records are capped (the first ones are kept); model_calls counts them all.
MAX_CALL_RECORDS = 32


class TurnUsage(BaseModel):
    """Model usage of one turn."""

    model_calls: int = 0
    replayed_calls: int = Field(default=0, description="Calls answered from the journal after a retry.")
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    provider: str | None = Field(default=None, description="The provider of the turn's last call.")
    api: str | None = Field(default=None, description="The API of the turn's last call.")
    calls: list[ModelCall] = Field(
        default_factory=list,
        description=f"Each call's model, the first {MAX_CALL_RECORDS}; empty when every call was "
        "answered, fresh, by the turn's model through the provider and API above (`records`).",
    )

    def _plain_call(self, model: str) -> ModelCall:
        """A fresh answer of ``model`` through this turn's provider and API, nothing skipped."""
        return ModelCall(model=model, provider=self.provider or "", api=self.api or "")

    def plain(self, model: str, calls: list[ModelCall]) -> bool:
        """Whether ``calls`` (all of the turn's) tell nothing beyond ``model``, ``provider`` and
        ``api``: each a fresh answer of that model, nothing skipped. The turn then leaves them out."""
        same = self._plain_call(model)
        return len(calls) == self.model_calls and all(c == same for c in calls)

    def records(self, model: str) -> list[ModelCall]:
        """Each call's model, with the calls ``plain`` left out filled in again."""
        if self.calls or not self.model_calls:
            return self.calls
        return [self._plain_call(model)] * min(self.model_calls, MAX_CALL_RECORDS)


# A turn's read-only tool call records are capped (the first ones are kept); the rest are counted.
MAX_TOOL_CALL_RECORDS = 64


class ToolCallRecord(BaseModel):
    """One call of a read-only tool (a plain ``@function_tool``) that ran inside an agent turn.

    The digests name the canonical JSON of the arguments and the exact text of the output as
    the artifact store holds them, so evidence can show what the tool saw and answered.
    """

    name: str
    call_id: str
    arguments_digest: str = Field(pattern=DIGEST_PATTERN)
    output_digest: str = Field(pattern=DIGEST_PATTERN)
    duration_ms: int = Field(default=0, ge=0)
    error: bool = Field(default=False, description="The tool raised; the output is what the model saw.")
    turn: int = 0


class CompactionRecord(BaseModel):
    """A turn's compaction of the conversation: older items replaced by one summary message.

    Token figures are estimates (4 characters of the items' JSON a token). The replaced items are
    kept whole in the artifact store (``replaced``, also among the turn's artifacts), so the
    evidence still holds everything the model saw.
    """

    budget_tokens: int = Field(description="The agent's compact_after_tokens.")
    items_before: int
    items_after: int
    tokens_before: int
    tokens_after: int
    replaced_items: int = Field(description="How many items the summary replaced.")
    replaced: ArtifactRef = Field(description="The replaced items, as JSON, in the artifact store.")
    conversation_ref: str = Field(
        pattern=DIGEST_PATTERN, description="The compacted conversation the turn started from."
    )
    summary_chars: int = 0


class TurnResult(BaseModel):
    """Output of ``agent.turn``: a final answer, or effectful calls for the workflow to decide."""

    # Written without its defaults (``schemas.payloads``): an activity's own payload, once a step.
    compact_payload: ClassVar[bool] = True

    turn: int
    status: Literal["final", "proposed"]
    final_output: str | None = None
    proposed: list[ProposedAction] = Field(default_factory=list)
    invalid: list[ActionResult] = Field(
        default_factory=list,
        description="Effectful calls whose arguments could not be planned: failed, back to the model.",
    )
    run_state_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    conversation_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    model: str = ""
    artifacts: list[ArtifactRef] = Field(
        default_factory=list, description="Artifacts the agent's read tools saved in this turn."
    )
    usage: TurnUsage = Field(default_factory=TurnUsage)
    tool_calls: list[ToolCallRecord] = Field(
        default_factory=list,
        description=f"The turn's read-only tool calls, the first {MAX_TOOL_CALL_RECORDS}.",
    )
    tool_calls_dropped: int = Field(default=0, description="Read-only tool calls past the cap, counted.")
    takeover_seconds: float | None = Field(
        default=None,
        description="This attempt took over from a worker lost mid-turn: seconds from its last heartbeat "
        "to this attempt's start. None: no worker was lost.",
    )
    mcp_catalog_ref: str | None = Field(
        default=None, pattern=DIGEST_PATTERN, description="The MCP tools the turn saw, for the next turns."
    )
    compacted: CompactionRecord | None = Field(
        default=None, description="The conversation was compacted before this turn ran (None: it was not)."
    )
    agent: str = Field(
        default="", description="The SDK agent the run ended on (after a handoff: the specialist)."
    )


class PlanInput(BaseModel):
    """Input of ``agent.plan``: plan an effectful tool call with (edited) arguments."""

    agent: str
    tool: str
    arguments: dict[str, Any]
    mcp_catalog_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    owner: str = Field(default="", description="The SDK agent that proposed the call: its tool is preferred.")


class PlanResult(BaseModel):
    """Output of ``agent.plan``: the planned operation, or why the arguments are not valid."""

    operation: Operation | None = None
    error: str | None = None
