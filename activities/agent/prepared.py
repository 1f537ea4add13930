"""What a worker builds once per agent instead of once per turn.

A turn used to build its agent (``AgentRegistration.build`` plus the durable conversion), resolve
its model chain and construct the SDK ``RunConfig`` afresh. None of that depends on the turn's
input, and two of them are costly: a real provider's chain makes a new ``AsyncOpenAI`` client (about
30 ms here, and a new connection pool every turn), and ``RunConfig`` coerces its model settings
(about 0.8 ms). ``PreparedAgents`` keeps them per agent name for the life of the worker; a turn
takes a shallow copy of the ``RunConfig`` and sets its own model (journaled, streamed), the one
per-turn value it carries. Trace ids stay unset, so the SDK starts a new trace for every run.

Kept per turn, because they hold one run's state: scripted models (a script may count its calls,
and ``AgentRoutedModel`` follows the agent of the current run), the ``ModelChain`` (its
``last_call``), the streaming wrappers, the hooks and the run context.

A task may name a model for its agent (``TaskSpec.model``, a fork's ``--model``): ``get(name, model)``
answers the same built agent and ``RunConfig`` with its registration on that model
(``registry.on_model``, as a shadow run's ``--model`` does), its chain resolved once per model and
kept for the last ``MAX_MODEL_OVERRIDES`` such models.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass, replace

from agent_worker.activities.agent.provider_errors import no_sdk_retries
from agent_worker.activities.agent.providers import ModelChoice, resolve_chain
from agent_worker.activities.agent.read_tools import bounded_agent
from agent_worker.activities.agent.registry import AgentRegistration, AgentRegistry, on_model
from agent_worker.activities.agent.sandbox_agents import SandboxAgentRefused, durable_agent
from agent_worker.schemas.config import ConfigError, WorkerConfig
from agents import Agent, RunConfig
from agents.models.interface import Model

# Agents on a model a task named (``TaskSpec.model``) kept at once; the oldest is dropped past it.
MAX_MODEL_OVERRIDES = 32


@dataclass(frozen=True)
class PreparedAgent:
    """One agent as its turns share it.

    Attributes:
        registration: The agent's registration.
        agent: The built agent, its read tools' outputs bounded (``bounded_agent``), its sandbox
            capabilities replaced by durable tools (``durable_agent``); MCP servers are replaced per
            turn, from the task's catalog.
        run_config: The turn's ``RunConfig`` without its model (``run_config_for`` adds it).
        model: The model a task named instead of the registration's own (None: its own).
    """

    registration: AgentRegistration
    agent: Agent
    run_config: RunConfig
    model: str | None = None

    def run_config_for(self, model: Model) -> RunConfig:
        """The ``RunConfig`` of one turn answered by ``model``: a shallow copy, so the settings the
        template coerced once are not coerced again."""
        config = copy.copy(self.run_config)
        config.model = model
        return config


class PreparedAgents:
    """The worker's agents, each built once (at start), and their model chains, each resolved once
    (at the agent's first turn, inside the worker's event loop, where its client will be used)."""

    def __init__(self, registry: AgentRegistry, config: WorkerConfig) -> None:
        """Build every agent of ``registry``.

        Raises:
            ConfigError: an agent cannot run durably here (``SandboxAgentRefused``), naming it.
        """
        self.config = config
        self._registry = registry
        self._agents: dict[str, PreparedAgent] = {}
        self._chains: dict[tuple[str, str | None], tuple[ModelChoice, ...]] = {}
        self._on_model: OrderedDict[tuple[str, str], PreparedAgent] = OrderedDict()
        for name in registry.names():
            registration = registry.get(name)
            try:
                agent = durable_agent(bounded_agent(registration.build()))
            except SandboxAgentRefused as err:
                raise ConfigError(f"agent {name!r}: {err}") from None
            self._agents[name] = PreparedAgent(registration, agent, _run_config(name))

    def get(self, name: str, model: str | None = None) -> PreparedAgent:
        """The prepared agent called ``name``; on ``model`` instead of its registration's when given.

        Raises:
            UnknownAgent: no such agent on this worker (the registry's error, naming those there are).
        """
        if name not in self._agents:
            self._registry.get(name)
        if not model:
            return self._agents[name]
        key = (name, model)
        found = self._on_model.get(key)
        if found is None:
            own = self._agents[name]
            found = replace(own, registration=on_model(own.registration, model), model=model)
            self._on_model[key] = found
            if len(self._on_model) > MAX_MODEL_OVERRIDES:
                (old, _) = self._on_model.popitem(last=False)
                self._chains.pop(old, None)
        self._on_model.move_to_end(key)
        return found

    def chain(self, prepared: PreparedAgent) -> list[ModelChoice]:
        """The models that answer ``prepared``'s turn: a real provider's chain is resolved once and
        shared (its clients are safe to share); a scripted one is made afresh for every turn.

        Raises:
            ConfigError: a model cannot be resolved (checked at worker start, so not expected here).
            AgentError: no provider is configured and the agent has no scripted model.
        """
        key = (prepared.registration.name, prepared.model)
        shared = self._chains.get(key)
        if shared is not None:
            return list(shared)
        chain = resolve_chain(prepared.registration, prepared.agent, self.config)
        if not any(choice.scripted for choice in chain):
            self._chains[key] = tuple(chain)
        return chain


def _run_config(agent: str) -> RunConfig:
    return RunConfig(
        model_settings=no_sdk_retries(),  # Temporal owns retries
        # A tool the agent does not have (a model's slip) goes back to the model as a tool error, as
        # invalid arguments do; raised, it would fail every retry over the journaled response.
        tool_not_found_behavior="return_error_to_model",
        # The worker decides, process-wide, whether agent spans go anywhere (OTel, OpenAI).
        workflow_name=f"agent-worker:{agent}",
    )


__all__ = ["MAX_MODEL_OVERRIDES", "PreparedAgent", "PreparedAgents"]
