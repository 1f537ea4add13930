"""Which agents a worker can run, loaded by import path (``module:attribute``) from config."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents import Agent, FunctionTool
from agents.models.interface import Model

from activities.errors import ToolPlanError, UnknownAgent
from activities.loading import load_object

if TYPE_CHECKING:
    from activities.tools.mcp import McpRules


@dataclass(frozen=True)
class AgentRegistration:
    """An agent a task can name.

    Attributes:
        name: The name a ``TaskSpec.agent`` refers to.
        build: Returns a fresh ``Agent`` (called once per turn, so turns share no state).
        scripted_model: Returns a deterministic model, used when no real provider is configured.
        max_model_calls: Model calls one turn may make before it must stop.
        model: The agent's model: a model string (``local/qwen2``: provider ``local``; no prefix:
            ``openai``) or a ``Model``. Unset: the built ``Agent``'s own ``model``, else the worker's
            default (``AGENT_WORKER_OPENAI_MODEL``).
        fallback: Models that answer, in order, when the one before fails with an outage (HTTP 5xx,
            no connection, timeout) or is out of quota (429 ``insufficient_quota``).
        mcp: How the tools of the agent's MCP servers are treated, one ``McpRules`` per server (a
            server without rules: every tool needs the policy's approval, as a write).
    """

    name: str
    build: Callable[[], Agent]
    scripted_model: Callable[[], Model] | None = None
    max_model_calls: int = 10
    description: str = ""
    model: str | Model | None = None
    fallback: Sequence[str | Model] = ()
    mcp: Sequence[McpRules] = ()


class AgentRegistry:
    """Registrations by name."""

    def __init__(self, registrations: Iterable[AgentRegistration]) -> None:
        self._by_name: dict[str, AgentRegistration] = {}
        for reg in registrations:
            if reg.name in self._by_name:
                raise ValueError(f"agent {reg.name!r} is registered twice")
            self._by_name[reg.name] = reg

    @classmethod
    def from_import_paths(cls, paths: Iterable[str]) -> AgentRegistry:
        """Load registrations from ``module:attribute`` paths (an attribute may hold a list).

        Raises:
            ValueError: a path is malformed, cannot be imported, or holds no registration.
        """
        found: list[AgentRegistration] = []
        for path in paths:
            value = load_object(path, "agent registration")
            values = value if isinstance(value, list | tuple) else [value]
            if not all(isinstance(v, AgentRegistration) for v in values):
                raise ValueError(f"{path!r} does not hold AgentRegistration objects")
            found.extend(values)
        return cls(found)

    def names(self) -> list[str]:
        """The registered agent names."""
        return sorted(self._by_name)

    def get(self, name: str) -> AgentRegistration:
        """The registration called ``name``.

        Raises:
            UnknownAgent: no such agent on this worker.
        """
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownAgent(
                f"unknown agent {name!r}; this worker runs: {', '.join(self.names()) or 'none'}",
                operation="agent.turn",
            ) from None


def find_tool(agent: Agent, name: str) -> FunctionTool:
    """The function tool called ``name`` on ``agent``.

    Raises:
        ToolPlanError: the agent has no such function tool.
    """
    for tool in agent.tools:
        if isinstance(tool, FunctionTool) and tool.name == name:
            return tool
    raise ToolPlanError(f"agent {agent.name!r} has no tool {name!r}", operation="agent.plan")
