"""A task parked with a RunState stored by the openai-agents release before (0.24) resumes under the
release the worker has now: the upgrade's RunState replay (issue 39).

``tests/recorded/run_state_openai_agents_0.24.json`` is what the counter agent's first turn stored with
``run_state=always`` under openai-agents 0.24.0 (RunState schema 1.21): its RunState and its
conversation, as ``AgentActivities.turn`` put them in the artifact store. This test puts them back
in a store and runs the second turn from them, as a worker upgraded under a parked task does."""

from __future__ import annotations

import json
from pathlib import Path

from agent_worker.activities.agent.registry import AgentRegistry
from agent_worker.activities.agent.turn import AgentActivities
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.schemas.actions import ActionResult, ActionStatus
from agent_worker.schemas.turns import TurnInput
from agents.run_state import CURRENT_SCHEMA_VERSION
from temporalio.testing import ActivityEnvironment

from tests.helpers.support import TEST_AGENTS, make_config

RECORDED = Path(__file__).parent / "recorded" / "run_state_openai_agents_0.24.json"


async def test_a_run_state_stored_by_openai_agents_0_24_resumes_on_the_installed_release(
    tmp_path: Path,
) -> None:
    recorded = json.loads(RECORDED.read_text())
    assert recorded["openai_agents"] == "0.24.0" and recorded["run_state"]["$schemaVersion"] == "1.21"
    config = make_config(tmp_path / "data", run_state="always")
    store = LocalArtifactStore(config.artifact_dir)
    activities = AgentActivities(AgentRegistry.from_import_paths(TEST_AGENTS), store, config)
    output = json.dumps({"exit_code": 0, "stdout": "1\n", "stderr": ""})
    result = await ActivityEnvironment().run(
        activities.turn,
        TurnInput(
            task_id="t-upgrade",
            agent="counter",
            turn=2,
            prompt="count to 3",
            run_state_ref=store.put_json(recorded["run_state"]),
            conversation_ref=store.put_json(recorded["conversation"]),
            results=[
                ActionResult(
                    call_id="call_count_1", tool="run_shell", status=ActionStatus.EXECUTED, output=output
                )
            ],
        ),
    )

    # The stored run went on where 0.24 left it: the first call's output in, the second call out.
    assert result.status == "proposed", result
    [action] = result.proposed
    assert action.call_id == "call_count_2" and "echo 2" in json.dumps(action.arguments)
    conversation = store.get_json(result.conversation_ref)
    outputs = [i for i in conversation if i.get("type") == "function_call_output"]
    assert [(o["call_id"], json.loads(o["output"])["stdout"]) for o in outputs] == [("call_count_1", "1\n")]
    # The turn stored its RunState again, now in the installed release's own schema.
    assert result.run_state_ref is not None
    assert store.get_json(result.run_state_ref)["$schemaVersion"] == CURRENT_SCHEMA_VERSION
