"""A turn stores the SDK's RunState only when the conversation alone would not continue the run
exactly; otherwise the next turn starts from the conversation, which is much cheaper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_worker.activities.agent.registry import AgentRegistry
from agent_worker.activities.agent.turn import AgentActivities, needs_run_state
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.schemas.actions import ActionResult, ActionStatus
from agent_worker.schemas.turns import TurnInput
from agents import Agent, InputGuardrail, ModelSettings
from temporalio.testing import ActivityEnvironment

from tests.helpers.support import TEST_AGENTS, make_config


def test_only_runs_the_conversation_cannot_continue_keep_the_run_state() -> None:
    plain = Agent(name="plain")
    specialist = Agent(name="specialist")
    assert not needs_run_state(plain, plain)
    assert needs_run_state(plain, specialist), "a handoff: the next turn must continue on the specialist"
    assert needs_run_state(Agent(name="a", tool_use_behavior="stop_on_first_tool"), Agent(name="a"))
    assert needs_run_state(
        Agent(name="a", model_settings=ModelSettings(tool_choice="required")), Agent(name="a")
    )
    guarded = Agent(name="a", input_guardrails=[InputGuardrail(guardrail_function=lambda *_: None)])
    assert needs_run_state(guarded, guarded)


@pytest.mark.parametrize("mode", ["when_needed", "always"])
async def test_turns_continue_from_the_conversation_or_the_run_state(tmp_path: Path, mode: str) -> None:
    """Three turns of the counter: by default no RunState is stored and each turn continues from the
    conversation; with ``run_state=always`` each turn resumes the stored RunState. The model sees
    the same conversation either way (the counter's calls follow on from the previous outputs)."""
    config = make_config(tmp_path / "data", run_state=mode)
    store = LocalArtifactStore(config.artifact_dir)
    activities = AgentActivities(AgentRegistry.from_import_paths(TEST_AGENTS), store, config)
    env = ActivityEnvironment()
    run_state_ref = conversation_ref = None
    results: list[ActionResult] = []
    for turn in (1, 2, 3):
        result = await env.run(
            activities.turn,
            TurnInput(
                task_id="t-state",
                agent="counter",
                turn=turn,
                prompt="count to 3",
                run_state_ref=run_state_ref,
                conversation_ref=conversation_ref,
                results=results,
            ),
        )
        run_state_ref, conversation_ref = result.run_state_ref, result.conversation_ref
        if turn < 3:
            [action] = result.proposed
            assert action.call_id == f"call_count_{turn}"
            assert (run_state_ref is not None) is (mode == "always")
            output = json.dumps({"exit_code": 0, "stdout": f"{turn}\n", "stderr": ""})
            results = [
                ActionResult(
                    call_id=action.call_id, tool=action.tool, status=ActionStatus.EXECUTED, output=output
                )
            ]
    assert result.status == "proposed" and result.proposed[0].call_id == "call_count_3"
