"""What an agent proposes to do, and what happened when the workflow did it.

A tool call with an effect never runs inside the agent turn. The turn returns it as a
``ProposedAction`` carrying a planned ``operation`` (a sandbox command or a business write); the
workflow decides on it (policy, approval), executes the operation as its own activity, and feeds an
``ActionResult`` back into the next turn under the same ``call_id``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from agent_worker.schemas.digests import DIGEST_PATTERN, digest_json
from agent_worker.schemas.grants import ActionBasis, Grant
from agent_worker.schemas.questions import Question
from pydantic import BaseModel, Field


class EffectClass(StrEnum):
    """How a tool's call is run.

    ``read`` tools run inside the agent turn. Every other class stops the turn and is run by the
    workflow: ``sandbox`` as a command in the task's sandbox (or a sandbox-class MCP tool),
    ``write`` as an idempotent write keyed by an operation key (a business write, an own function
    declared with ``effect_tool``, a write-class MCP tool), ``delegate`` as a sub-task (a child
    ``AgentTask`` workflow), ``ask`` as a question to a person (the built-in ``ask_human`` tool,
    ``schemas.questions``), answered like an approval.
    """

    READ = "read"
    SANDBOX = "sandbox"
    WRITE = "write"
    DELEGATE = "delegate"
    ASK = "ask"


class SandboxCommand(BaseModel):
    """A command to run in the task's sandbox, planned from a sandbox tool's arguments."""

    kind: Literal["sandbox.exec"] = "sandbox.exec"
    argv: list[str] = Field(min_length=1)
    stdin: str | None = None
    timeout_seconds: float | None = Field(default=None, gt=0, le=24 * 3600)
    collect: list[str] = Field(
        default_factory=list,
        description="Files in the sandbox work dir to keep as artifacts after the command.",
    )


class BusinessWrite(BaseModel):
    """A record to write into the business system, planned from a write tool's arguments."""

    kind: Literal["business.write"] = "business.write"
    record_type: str = Field(min_length=1)
    payload: dict[str, Any]
    artifacts: list[Annotated[str, Field(pattern=DIGEST_PATTERN)]] = Field(
        default_factory=list, description="Digests of the artifacts this write refers to."
    )
    system: str | None = Field(
        default=None,
        description="The business system, by the name the worker registers it under (None: the default).",
    )


class Delegation(BaseModel):
    """A sub-task for another registered agent, planned from a delegate tool's arguments. It runs as
    a child task with the parent's tenant, policy and sandbox spec."""

    kind: Literal["agent.delegate"] = "agent.delegate"
    agent: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    inputs: list[str] = Field(default_factory=list, description="Names of the parent's inputs to pass on.")


class FunctionCall(BaseModel):
    """A call of one of the agent's own async functions, declared with ``effect_tool``: it runs as
    its own activity (``tool.call``) with the tool's timeout and attempts, under an operation key
    passed in the function's key parameter."""

    kind: Literal["tool.call"] = "tool.call"
    tool: str = Field(min_length=1)
    system: str | None = Field(default=None, description="The business system it writes to, by name.")
    arguments: dict[str, Any]
    key_parameter: str | None = Field(default=None, description="Where the operation key goes.")
    has_lookup: bool = Field(default=False, description="A lookup reconciles an unknown outcome.")
    timeout_seconds: float = Field(default=60.0, gt=0, le=24 * 3600)
    max_attempts: int = Field(default=5, ge=1, le=100)
    role: Literal["agent", "business"] = Field(
        default="business", description="Which workers run it: their queue and credentials."
    )


class McpCall(BaseModel):
    """A call of a write-class or sandbox-class tool of an MCP server, run as its own activity
    (``mcp.call``) after policy and approval."""

    kind: Literal["mcp.call"] = "mcp.call"
    server: str = Field(min_length=1)
    tool: str = Field(min_length=1, description="The tool's name on its server.")
    arguments: dict[str, Any]
    key_argument: str | None = Field(default=None, description="The argument the operation key goes in.")
    lookup_tool: str | None = Field(
        default=None, description="A tool of the same server that finds a call's effect by its key."
    )
    timeout_seconds: float = Field(default=60.0, gt=0, le=24 * 3600)
    max_attempts: int = Field(default=5, ge=1, le=100)


class BudgetRaise(BaseModel):
    """A task's request to extend a budget it used up (``Budgets.extension``): not a model's tool
    call but the task's own, decided like any approval; approved, ``budget``'s limit grows by ``add``."""

    kind: Literal["budget.extend"] = "budget.extend"
    budget: str = Field(min_length=1, description="The `Budgets` field, e.g. max_cost_usd.")
    limit: float
    used: float
    add: float = Field(gt=0)


Operation = Annotated[
    SandboxCommand | BusinessWrite | Delegation | FunctionCall | McpCall | BudgetRaise | Question,
    Field(discriminator="kind"),
]


def action_version(tool: str, arguments: dict[str, Any], operation: Operation) -> str:
    """The version an approval binds to: sha256 of the canonical action.

    It covers the tool name, its arguments, and the planned operation, which names the digests of
    every artifact the action refers to, so a changed report is a different version.
    """
    planned = operation.model_dump(mode="json")
    if "system" in planned and planned["system"] is None:
        # A write to the default system keeps the version it had before systems had names.
        del planned["system"]
    return digest_json({"tool": tool, "arguments": arguments, "operation": planned})


class ProposedAction(BaseModel):
    """An effectful tool call the agent wants to make, waiting for the workflow's decision."""

    call_id: str
    tool: str
    effect: EffectClass
    arguments: dict[str, Any]
    operation: Operation
    version: str = Field(pattern=DIGEST_PATTERN)
    turn: int = 0
    agent: str = Field(
        default="",
        description="The SDK agent that made the call (after a handoff, the specialist; empty in "
        "tasks that started before this was recorded).",
    )
    basis: ActionBasis | None = Field(
        default=None,
        description="Its tool's schema digest and its agent's version, which a remembered grant binds to "
        "(None from workers before grants).",
    )
    grant: Grant | None = Field(
        default=None,
        description="A remembered grant the turn found for it (only for tasks whose policy allows "
        "grants); the task uses it where it would otherwise ask for approval (workflows.grants).",
    )
    voided_grants: list[str] = Field(
        default_factory=list, description="Grants the lookup found void for it, each 'id: why'."
    )


class ActionStatus(StrEnum):
    """What became of a proposed action."""

    EXECUTED = "executed"
    EDITED = "edited"  # executed with arguments changed by the approver
    REJECTED = "rejected"  # a principal said no
    DENIED = "denied"  # the policy said no
    FAILED = "failed"  # the effect ran and failed for good
    NOT_RUN = "not_run"  # the task ended before the action could run
    EXPIRED = "expired"  # nobody decided by the request's deadline; it did not run (never "rejected")
    ANSWERED = "answered"  # a question a person answered: the answer is the output
    RESPONDED = "responded"  # an approver answered with a message instead of running it; it did not run


class ActionResult(BaseModel):
    """The outcome of one action, as the next agent turn receives it."""

    call_id: str
    tool: str
    status: ActionStatus
    output: str = Field(description="The tool's output, or a preview of it when output_ref is set.")
    output_ref: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="Digest of what the model reads in the artifact store (a command's result, a long tool "
        "output's head and the note naming the whole): large outputs stay out of history.",
    )
    edited_arguments: dict[str, Any] | None = None


# The outcomes of actions that ran: the model sees such a result as its tool's output (any other is a
# refusal of the call), read whole by its ``output_ref`` when it has one (``activities.agent.turn``),
# so the preview in ``output`` is not read.
RAN = frozenset({ActionStatus.EXECUTED, ActionStatus.EDITED, ActionStatus.FAILED, ActionStatus.ANSWERED})


def without_preview(result: ActionResult) -> ActionResult:
    """``result`` as a turn's input carries it: without the preview a turn does not read."""
    if result.output_ref is None or result.status not in RAN or not result.output:
        return result
    return result.model_copy(update={"output": ""})
