"""agent-worker's public face: the one import path agent authors and clients rely on.

Everything importable from ``agent_worker`` (and its modules ``agent_worker.client`` and
``agent_worker.testing``) is the stable API: names listed in ``__all__`` keep working across
releases. Everything else in the distribution (``activities``, ``workflows``, ``schemas``, ``cli``,
``worker`` ...) is internal and may move; its old import paths keep working for one release.

- **Author API**: ``AgentRegistration``; the effect decorators ``sandbox_tool``, ``write_tool``,
  ``delegate_tool`` and the operations they return (``SandboxCommand``, ``BusinessWrite``,
  ``Delegation``); the built-in ``ask_human`` tool (the agent asks a person); ``effect_tool`` for
  an own function with a side effect (and ``ToolError`` for it to refuse a call); ``McpRules`` and
  ``McpWrite`` for the tools of the agent's MCP servers; the OpenAI Agents SDK's ``Agent`` and
  ``function_tool`` (read tools);
  ``memory_tools`` for the built-in ``remember``/``recall`` tools (docs/memory.md);
  ``current_turn`` for a tool that needs the task's artifact store; ``ConversationModel`` and its
  helpers ``tool_outputs`` and ``first_user_text`` for deterministic models.
- **Payloads**: ``TaskSpec`` and the models a client reads or sends (``TaskStatus``, ``TaskResult``,
  ``ApprovalRequest``, ``ApprovalDecision`` ...). All are plain JSON on the wire.
- **Client**: ``AgentWorkerClient`` (start, status, pending, awaiting, decide, submit (a
  ``Decision``: the one decision path), say, cancel, result, and ``schedules``: tasks on a
  Temporal Schedule, ``TaskSchedule``, ``OverlapPolicy``, ``ScheduleView``) and its errors,
  rooted at ``AgentWorkerError``.
- **Worker**: ``AgentWorkerPlugin``, a Temporal plugin that adds our workflows and activities to a
  ``temporalio.worker.Worker`` of your own (docs/operations.md, "Running in a worker of your own");
  imported on first use.
- **Testing**: ``agent_worker.testing`` (``Script``, ``local_worker``), imported on its own.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# The source layout: the subpackages (``agent_worker.schemas``, ``agent_worker.workflows`` ...) are the
# folders at the repository root, mapped into this package by pyproject.toml's ``package-dir`` when the
# wheel is built. Run from a checkout (the tests, ``python worker.py``, ``PYTHONPATH=.``), where this
# folder has none of them, the package finds them at the root: its ``__path__`` lists the root after
# this folder. An installed wheel has them in this folder and never looks further.
_SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(__path__[0], "workflows")) and os.path.isfile(
    os.path.join(_SOURCE_ROOT, "workflows", "__init__.py")
):
    __path__.append(_SOURCE_ROOT)

# Only now: from a checkout, ``agent_worker.schemas`` is found through the path just set (imported
# before it, another checkout's editable install would answer; ``tests/test_namespace.py``).
from agent_worker.schemas.lazy import lazy_exports  # noqa: E402

# The package's version (pyproject.toml's, which a test keeps equal). Its release line (0.4) is what a
# task started by this package's client begins on (``schemas.tasks.CURRENT_RELEASE``, docs/upgrading.md).
__version__ = "0.4.0"

# Each public name and the module that defines it. Importing ``agent_worker`` (or its client) loads none
# of them: a name is imported on first use (PEP 562), so a process that only starts and decides tasks
# never loads the Agents SDK, the sandboxes or the stores. Adding a public name is one line here and one
# in ``__all__``.
_EXPORTS: dict[str, str] = {
    "Agent": "agents",
    "function_tool": "agents",
    "AgentRegistration": "agent_worker.activities.agent",
    "ConversationModel": "agent_worker.activities.agent",
    "ask_human": "agent_worker.activities.agent",
    "current_turn": "agent_worker.activities.agent",
    "delegate_tool": "agent_worker.activities.agent",
    "first_user_text": "agent_worker.activities.agent",
    "memory_tools": "agent_worker.activities.agent.memory_tools",
    "sandbox_tool": "agent_worker.activities.agent",
    "tool_outputs": "agent_worker.activities.agent",
    "write_tool": "agent_worker.activities.agent",
    "ToolError": "agent_worker.activities.errors",
    "McpRules": "agent_worker.activities.tools",
    "McpWrite": "agent_worker.activities.tools",
    "effect_tool": "agent_worker.activities.tools",
    "AgentWorkerClient": "agent_worker.client",
    "AgentWorkerError": "agent_worker.client",
    "AwaitingTask": "agent_worker.client",
    "DecisionRefused": "agent_worker.client",
    "Decision": "agent_worker.decisions",
    "InvalidDecision": "agent_worker.decisions",
    "TaskEnded": "agent_worker.client",
    "TaskNotFound": "agent_worker.client",
    "TaskRef": "agent_worker.client",
    "WorkerUnreachable": "agent_worker.client",
    "ScheduleExists": "agent_worker.schedules",
    "ScheduleNotFound": "agent_worker.schedules",
    # The worker's whole build (workflows, every role's activities), for a worker of the user's own.
    "AgentWorkerPlugin": "agent_worker.plugin",
    "BusinessWrite": "agent_worker.schemas.actions",
    "Delegation": "agent_worker.schemas.actions",
    "ProposedAction": "agent_worker.schemas.actions",
    "SandboxCommand": "agent_worker.schemas.actions",
    "ApprovalDecision": "agent_worker.schemas.approvals",
    "ApprovalRequest": "agent_worker.schemas.approvals",
    "DecisionKind": "agent_worker.schemas.approvals",
    "DecisionOutcome": "agent_worker.schemas.approvals",
    "InputFile": "agent_worker.schemas.artifacts",
    "is_digest": "agent_worker.schemas.digests",
    "Event": "agent_worker.schemas.events",
    "EventType": "agent_worker.schemas.events",
    "Budgets": "agent_worker.schemas.tasks",
    "Evidence": "agent_worker.schemas.tasks",
    "PolicyRule": "agent_worker.schemas.tasks",
    "PolicySpec": "agent_worker.schemas.tasks",
    "TaskInput": "agent_worker.schemas.tasks",
    "TaskPhase": "agent_worker.schemas.tasks",
    "TaskResult": "agent_worker.schemas.tasks",
    "TaskSpec": "agent_worker.schemas.tasks",
    "TaskStatus": "agent_worker.schemas.tasks",
    "OverlapPolicy": "agent_worker.schemas.schedules",
    "ScheduleView": "agent_worker.schemas.schedules",
    "TaskSchedule": "agent_worker.schemas.schedules",
}

if TYPE_CHECKING:  # what a type checker and an IDE see; at run time ``__getattr__`` imports on demand
    from agents import Agent, function_tool

    from agent_worker.activities.agent import (
        AgentRegistration,
        ConversationModel,
        ask_human,
        current_turn,
        delegate_tool,
        first_user_text,
        sandbox_tool,
        tool_outputs,
        write_tool,
    )
    from agent_worker.activities.agent.memory_tools import memory_tools
    from agent_worker.activities.errors import ToolError
    from agent_worker.activities.tools import McpRules, McpWrite, effect_tool
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
    from agent_worker.plugin import AgentWorkerPlugin
    from agent_worker.schedules import ScheduleExists, ScheduleNotFound
    from agent_worker.schemas.actions import BusinessWrite, Delegation, ProposedAction, SandboxCommand
    from agent_worker.schemas.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        DecisionKind,
        DecisionOutcome,
    )
    from agent_worker.schemas.artifacts import InputFile
    from agent_worker.schemas.digests import is_digest
    from agent_worker.schemas.events import Event, EventType
    from agent_worker.schemas.schedules import OverlapPolicy, ScheduleView, TaskSchedule
    from agent_worker.schemas.tasks import (
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


__getattr__ = lazy_exports(globals(), _EXPORTS)


def __dir__() -> list[str]:
    """The module's attributes and its lazily imported public names (for ``dir()`` and completion)."""
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Agent",
    "AgentRegistration",
    "ask_human",
    "AgentWorkerClient",
    "AgentWorkerError",
    "AgentWorkerPlugin",
    "ApprovalDecision",
    "ApprovalRequest",
    "AwaitingTask",
    "Budgets",
    "BusinessWrite",
    "ConversationModel",
    "Decision",
    "DecisionKind",
    "DecisionOutcome",
    "DecisionRefused",
    "Delegation",
    "Event",
    "EventType",
    "Evidence",
    "InputFile",
    "InvalidDecision",
    "McpRules",
    "McpWrite",
    "OverlapPolicy",
    "PolicyRule",
    "PolicySpec",
    "ProposedAction",
    "SandboxCommand",
    "ScheduleExists",
    "ScheduleNotFound",
    "ScheduleView",
    "TaskEnded",
    "TaskInput",
    "TaskNotFound",
    "TaskPhase",
    "TaskRef",
    "TaskResult",
    "TaskSchedule",
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
    "memory_tools",
    "sandbox_tool",
    "tool_outputs",
    "write_tool",
]
