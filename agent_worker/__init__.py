"""agent-worker's public face: the one import path agent authors and clients rely on.

Everything importable from ``agent_worker`` (and its modules ``agent_worker.client`` and
``agent_worker.testing``) is the stable API: names listed in ``__all__`` keep working across
releases. Everything else in the distribution (``activities``, ``workflows``, ``schemas``, ``cli``,
``worker`` ...) is internal and may move; its old import paths keep working for one release.

- **Author API**: ``AgentRegistration``; the effect decorators ``sandbox_tool``, ``write_tool``,
  ``delegate_tool`` and the operations they return (``SandboxCommand``, ``BusinessWrite``,
  ``Delegation``); ``effect_tool`` for an own function with a side effect (and ``ToolError`` for it
  to refuse a call); ``McpRules`` and ``McpWrite`` for the tools of the agent's MCP servers; the OpenAI Agents
  SDK's ``Agent`` and ``function_tool`` (read tools);
  ``current_turn`` for a tool that needs the task's artifact store; ``ConversationModel`` and its
  helpers ``tool_outputs`` and ``first_user_text`` for deterministic models.
- **Payloads**: ``TaskSpec`` and the models a client reads or sends (``TaskStatus``, ``TaskResult``,
  ``ApprovalRequest``, ``ApprovalDecision`` ...). All are plain JSON on the wire.
- **Client**: ``AgentWorkerClient`` (start, status, pending, awaiting, decide, say, cancel, result)
  and its errors, rooted at ``AgentWorkerError``.
- **Worker**: ``AgentWorkerPlugin``, a Temporal plugin that adds our workflows and activities to a
  ``temporalio.worker.Worker`` of your own (docs/operations.md, "Running in a worker of your own");
  imported on first use.
- **Testing**: ``agent_worker.testing`` (``Script``, ``local_worker``), imported on its own.
"""

from typing import Any

from agents import Agent, function_tool

from activities.agent import (
    AgentRegistration,
    ConversationModel,
    current_turn,
    delegate_tool,
    first_user_text,
    sandbox_tool,
    tool_outputs,
    write_tool,
)
from activities.errors import ToolError
from activities.tools import McpRules, McpWrite, effect_tool
from agent_worker.client import (
    AgentWorkerClient,
    AgentWorkerError,
    AwaitingTask,
    DecisionRefused,
    TaskEnded,
    TaskNotFound,
    TaskRef,
    WorkerUnreachable,
)
from schemas.actions import BusinessWrite, Delegation, ProposedAction, SandboxCommand
from schemas.approvals import ApprovalDecision, ApprovalRequest, DecisionKind, DecisionOutcome
from schemas.artifacts import InputFile
from schemas.digests import is_digest
from schemas.events import Event, EventType
from schemas.tasks import (
    Budgets,
    Evidence,
    PolicyRule,
    PolicySpec,
    TaskInput,
    TaskPhase,
    TaskResult,
    TaskSpec,
    TaskStatus,
)


def __getattr__(name: str) -> Any:
    # The plugin brings the worker's whole build (workflows, every role's activities): only on use,
    # so that a client importing ``agent_worker`` does not pay for it.
    if name == "AgentWorkerPlugin":
        from agent_worker.plugin import AgentWorkerPlugin

        return AgentWorkerPlugin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Agent",
    "AgentRegistration",
    "AgentWorkerClient",
    "AgentWorkerError",
    "AgentWorkerPlugin",
    "ApprovalDecision",
    "ApprovalRequest",
    "AwaitingTask",
    "Budgets",
    "BusinessWrite",
    "ConversationModel",
    "DecisionKind",
    "DecisionOutcome",
    "DecisionRefused",
    "Delegation",
    "Event",
    "EventType",
    "Evidence",
    "InputFile",
    "McpRules",
    "McpWrite",
    "PolicyRule",
    "PolicySpec",
    "ProposedAction",
    "SandboxCommand",
    "TaskEnded",
    "TaskInput",
    "TaskNotFound",
    "TaskPhase",
    "TaskRef",
    "TaskResult",
    "TaskSpec",
    "TaskStatus",
    "ToolError",
    "WorkerUnreachable",
    "current_turn",
    "delegate_tool",
    "effect_tool",
    "first_user_text",
    "function_tool",
    "is_digest",
    "sandbox_tool",
    "tool_outputs",
    "write_tool",
]
