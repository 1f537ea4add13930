"""Which agents a worker can run, loaded by import path (``module:attribute``) from config."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_worker.activities.errors import ToolPlanError, UnknownAgent
from agent_worker.activities.loading import load_object
from agent_worker.activities.sdk_shims import handoff_agent
from agents import Agent, FunctionTool, Handoff
from agents.models.interface import Model

if TYPE_CHECKING:
    from agent_worker.activities.tools.mcp import McpRules


@dataclass(frozen=True)
class AgentRegistration:
    """An agent a task can name.

    Attributes:
        name: The name a ``TaskSpec.agent`` refers to.
        build: Returns the ``Agent``. A worker calls it once and shares the agent among all its
            turns, as an Agents SDK agent is meant to be shared (``activities.agent.prepared``): it
            must keep no state of one run (MCP servers are connected afresh per turn).
        scripted_model: Returns a deterministic model, used when no real provider is configured.
        max_model_calls: Model calls one turn may make before it must stop.
        model: The agent's model: a model string (``local/qwen2``: provider ``local``; no prefix:
            ``openai``) or a ``Model``. Unset: the built ``Agent``'s own ``model``, else the worker's
            default (``AGENT_WORKER_OPENAI_MODEL``).
        fallback: Models that answer, in order, when the one before fails with an outage (HTTP 5xx,
            no connection, timeout) or is out of quota (429 ``insufficient_quota``).
        mcp: How the tools of the agent's MCP servers are treated, one ``McpRules`` per server (a
            server without rules: every tool needs the policy's approval, as a write).
        scripted_models: Scripted models of the agents its handoffs reach, by agent name (a
            specialist answers with its own script); an agent not named here answers with
            ``scripted_model``.
        compact_after_tokens: Compact the conversation before a turn once it passes this many
            tokens (estimated, 4 characters a token): see ``activities.agent.compaction``. Unset:
            the worker's ``compact_after_tokens`` (unset too: never).
        version: The agent's version, as its author declares it: remembered grants given for this
            agent void themselves when it changes (``schemas.grants``). Bump it when a change should
            make approvers look again.
    """

    name: str
    build: Callable[[], Agent]
    scripted_model: Callable[[], Model] | None = None
    max_model_calls: int = 10
    description: str = ""
    model: str | Model | None = None
    fallback: Sequence[str | Model] = ()
    mcp: Sequence[McpRules] = ()
    compact_after_tokens: int | None = None
    scripted_models: Mapping[str, Callable[[], Model]] = field(default_factory=dict)
    version: str = ""


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


def on_model(registration: AgentRegistration, model: str | None) -> AgentRegistration:
    """``registration`` answered by ``model`` (a model string, resolved as the registration's own
    would be: ``activities.agent.providers``) instead of its own; its fallbacks still follow. What a
    shadow run's ``--model`` and a task's ``TaskSpec.model`` (a fork's ``--model``) ask. None: as is."""
    return registration if not model else dataclasses.replace(registration, model=model)


def agent_graph(agent: Agent) -> list[Agent]:
    """``agent`` and every agent its handoffs reach (recursively), breadth first, each once.

    A handoff may be a plain ``Agent`` or a ``Handoff`` (from ``handoff()``: its target is held by a
    weak reference); a handoff whose target cannot be resolved is skipped, and a cycle (a specialist
    that hands back to triage) ends where an agent was already seen.
    """
    found: list[Agent] = []
    seen: set[int] = set()
    queue: deque[Any] = deque([agent])
    while queue:
        current = queue.popleft()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current)
        for item in current.handoffs:
            target = handoff_target(item)
            if isinstance(target, Agent):
                queue.append(target)
    return found


def handoff_target(item: Any) -> Any:
    """The agent a handoff entry leads to: the entry itself when it is an ``Agent``; for a
    ``Handoff`` (from ``handoff()``, which holds its target by a weak reference) that target, or
    None when it cannot be resolved."""
    if not isinstance(item, Handoff):
        return item
    return handoff_agent(item)


def find_agent(agent: Agent, name: str) -> Agent | None:
    """The agent called ``name`` in ``agent``'s graph (``agent_graph``), or None."""
    return next((a for a in agent_graph(agent) if a.name == name), None)


def find_tool(agent: Agent, name: str, owner: str | None = None) -> FunctionTool:
    """The function tool called ``name`` on any agent of ``agent``'s graph: the start agent and the
    agents its handoffs reach, so a specialist's tool is found too. ``owner`` (the agent that
    proposed the call) is looked at first; then the graph in breadth-first order.

    Raises:
        ToolPlanError: no agent of the graph has such a function tool.
    """
    graph = agent_graph(agent)
    ordered = sorted(graph, key=lambda a: a.name != owner) if owner else graph
    for candidate in ordered:
        for tool in candidate.tools:
            if isinstance(tool, FunctionTool) and tool.name == name:
                return tool
    names = ", ".join(repr(a.name) for a in graph)
    raise ToolPlanError(f"no agent of {names} has a tool {name!r}", operation="agent.plan")
