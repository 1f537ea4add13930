"""A worker builds each agent, its RunConfig and a real provider's model chain once, not once per
turn (``activities.agent.prepared``); what belongs to one turn (its model, journal, trace) stays
its own, also for turns of the same agent that run at the same time."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_worker.activities.agent.models import ConversationModel, first_user_text
from agent_worker.activities.agent.registry import AgentRegistration, AgentRegistry
from agent_worker.activities.agent.turn import AgentActivities
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.schemas.turns import TurnInput
from agents import Agent
from agents.items import TResponseOutputItem
from temporalio.testing import ActivityEnvironment

from agent_worker.testing import assistant_message
from tests.helpers.support import make_config


class Echo(ConversationModel):
    """Answers with the task's prompt, so a turn shows whose conversation its model saw."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        return [assistant_message(f"echo: {first_user_text(items)}")]


def echo_activities(tmp_path: Path, builds: list[int], **overrides: Any) -> AgentActivities:
    def build() -> Agent:
        builds.append(1)
        return Agent(name="echo", instructions="Echo.")

    registration = AgentRegistration(name="echo", build=build, scripted_model=Echo)
    config = make_config(tmp_path / "data", **overrides)
    return AgentActivities(AgentRegistry([registration]), LocalArtifactStore(config.artifact_dir), config)


async def test_turns_share_the_agent_built_at_start_and_keep_their_own_model_and_answer(
    tmp_path: Path,
) -> None:
    """Five turns (three at once) build nothing after the worker's start, each answers its own
    task's prompt with one model call of its own, and the shared RunConfig is left without a model
    or trace id."""
    builds: list[int] = []
    activities = echo_activities(tmp_path, builds)
    built_at_start = len(builds)
    env = ActivityEnvironment()

    async def turn(task: str) -> str:
        result = await env.run(activities.turn, TurnInput(task_id=task, agent="echo", turn=1, prompt=task))
        assert result.status == "final" and result.usage.model_calls == 1
        assert result.usage.replayed_calls == 0, "answered from another turn's journal"
        return result.final_output

    answers = await asyncio.gather(*(turn(f"t-{i}") for i in range(3)))
    answers += [await turn("t-3"), await turn("t-4")]
    assert answers == [f"echo: t-{i}" for i in range(5)]
    assert len(builds) == built_at_start
    template = activities.agents.get("echo").run_config
    assert template.model is None and template.trace_id is None
    assert template.workflow_name == "agent-worker:echo"


def test_a_real_providers_chain_is_resolved_once_and_a_scripted_one_per_turn(tmp_path: Path) -> None:
    """With a real provider, two turns get the same model object (one client, one connection pool);
    with scripted models, each turn gets a fresh one (a script may hold one run's state)."""
    real = echo_activities(tmp_path / "real", [], model_provider="openai", openai_api_key="sk-test")
    prepared = real.agents.get("echo")
    first, second = real.agents.chain(prepared), real.agents.chain(prepared)
    assert first[0].provider == "openai" and first[0].model is second[0].model
    assert first is not second, "each turn gets its own list"
    scripted = echo_activities(tmp_path / "scripted", [])
    prepared = scripted.agents.get("echo")
    assert scripted.agents.chain(prepared)[0].model is not scripted.agents.chain(prepared)[0].model
    config = prepared.run_config_for(scripted.agents.chain(prepared)[0].model)
    assert config.model is not None and prepared.run_config.model is None
    assert config.model_settings is prepared.run_config.model_settings, "coerced once, not per turn"
