"""Read-only tools run inside the agent turn, yet each call is recorded: a `tool.called` event and a
record in the evidence (name, call id, digests of its arguments and output, duration, error), with
the arguments and output in the artifact store, copied into the bundle and checked by `verify`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.agent import AgentRegistration, AgentRegistry, ConversationModel, tool_outputs
from agent_worker.activities.agent.turn import AgentActivities
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.events import JsonlEventSink
from agent_worker.schemas.actions import ActionResult, ActionStatus
from agent_worker.schemas.digests import canonical_json, digest_bytes
from agent_worker.schemas.tasks import TaskPhase
from agent_worker.schemas.turns import MAX_TOOL_CALL_RECORDS, TurnInput
from agents import Agent, function_tool
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call
from temporalio.testing import ActivityEnvironment

from tests.helpers.support import TEST_AGENTS, TaskEnv, assert_replays, make_config, run_cli, running_worker


@function_tool
def lookup_price(item: str, quantity: int) -> str:
    """Look up the price of some items.

    Args:
        item: What to price.
        quantity: How many.
    """
    return json.dumps({"item": item, "total": quantity * 3})


@function_tool
def broken_lookup(item: str) -> str:
    """A lookup that always fails.

    Args:
        item: What to look up.
    """
    raise RuntimeError(f"price list for {item} is gone")


class PricesScript(ConversationModel):
    """Calls both read tools in one response, then answers with what they said."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "lookup_price" in outputs:
            return [assistant_message(f"price: {outputs['lookup_price']}")]
        return [
            function_call("lookup_price", {"quantity": 4, "item": "apples"}, call_id="call_price"),
            function_call("broken_lookup", {"item": "pears"}, call_id="call_broken"),
        ]


class ManyPricesScript(ConversationModel):
    """Prices 70 items in one response (past the turn's cap on records), then answers."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        if tool_outputs(items):
            return [assistant_message("priced everything")]
        return [
            function_call("lookup_price", {"item": f"item-{n}", "quantity": n}, call_id=f"call_{n}")
            for n in range(70)
        ]


registrations = [
    AgentRegistration(
        name="prices",
        build=lambda: Agent(name="prices", instructions="Price things.", tools=[lookup_price, broken_lookup]),
        scripted_model=PricesScript,
    ),
    AgentRegistration(
        name="many-prices",
        build=lambda: Agent(name="many-prices", instructions="Price things.", tools=[lookup_price]),
        scripted_model=ManyPricesScript,
    ),
]


@pytest.fixture
async def prices_env(config_env: TaskEnv) -> Any:
    config = make_config(config_env.config.data_dir, agents=[*TEST_AGENTS, f"{__name__}:registrations"])
    env = TaskEnv(client=config_env.client, config=config, address=config_env.address)
    async with running_worker(env.client, env.config):
        yield env


async def test_read_tool_calls_are_events_and_evidence_that_verify_checks(
    prices_env: TaskEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task whose agent calls two read-only tools (one raises) completes; each call is a
    `tool.called` event and an evidence record whose digests resolve to the canonical arguments and
    the output the model saw; the bundle holds them and `verify` passes; altering the bundle's copy of
    one output makes `verify` fail naming that call."""
    env = prices_env
    handle = await env.start({"agent": "prices", "prompt": "price 4 apples"})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == 'price: {"item": "apples", "total": 12}'

    records = {r.call_id: r for r in result.evidence.tool_calls}
    assert set(records) == {"call_price", "call_broken"}
    price, broken = records["call_price"], records["call_broken"]
    assert (price.name, price.turn, price.error) == ("lookup_price", 1, False)
    assert (broken.name, broken.error) == ("broken_lookup", True)
    assert price.arguments_digest == digest_bytes(canonical_json({"item": "apples", "quantity": 4}))
    store = env.store()
    assert json.loads(store.get(price.arguments_digest)) == {"item": "apples", "quantity": 4}
    assert store.get(price.output_digest) == b'{"item": "apples", "total": 12}'
    assert b"error" in store.get(broken.output_digest)
    assert price.duration_ms >= 0

    events = [
        e for e in JsonlEventSink(env.config.events_dir).read(handle.id) if e.type.value == "tool.called"
    ]
    assert {e.data["call_id"]: e.data for e in events} == {
        r.call_id: r.model_dump(mode="json") for r in records.values()
    }

    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    bundle = tmp_path / "bundle"
    code, out, err = await run_cli(capsys, "--address", env.address, "evidence", handle.id, "-o", str(bundle))
    assert code == 0, err
    assert "read-only tool calls 2" in out
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert {r["call_id"] for r in manifest["evidence"]["tool_calls"]} == {"call_price", "call_broken"}
    copy = bundle / "artifacts" / price.output_digest.split(":", 1)[1]
    assert copy.read_bytes() == b'{"item": "apples", "total": 12}'

    code, out, _ = await run_cli(capsys, "verify", str(bundle))
    assert code == 0, out
    assert "ok  tool call lookup_price call_price (turn 1)" in out
    assert "ok  tool call broken_lookup call_broken (turn 1)" in out

    copy.write_bytes(b'{"item": "apples", "total": 1}')
    code, out, _ = await run_cli(capsys, "verify", str(bundle))
    assert code == 1
    [failed] = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failed.startswith("FAIL tool call lookup_price call_price (turn 1): output bundle copy altered")
    await assert_replays(env.client, handle.id)


def turn_activities(tmp_path: Path) -> AgentActivities:
    config = make_config(tmp_path / "data", agents=[*TEST_AGENTS, f"{__name__}:registrations"])
    registry = AgentRegistry.from_import_paths(config.agents)
    return AgentActivities(registry, LocalArtifactStore(config.artifact_dir), config)


async def test_a_retried_turn_answered_from_the_journal_records_the_same_calls(tmp_path: Path) -> None:
    """Running the same turn again (a retry: every model call comes from the journal) gives the same
    records, digests and all; only the measured duration may differ."""
    activities, env = turn_activities(tmp_path), ActivityEnvironment()
    turn = TurnInput(task_id="t-retry", agent="prices", turn=1, prompt="price 4 apples")
    first = await env.run(activities.turn, turn)
    again = await env.run(activities.turn, turn)
    assert again.usage.replayed_calls == again.usage.model_calls > 0
    assert len(first.tool_calls) == 2
    assert [r.model_dump(exclude={"duration_ms"}) for r in again.tool_calls] == [
        r.model_dump(exclude={"duration_ms"}) for r in first.tool_calls
    ]


async def test_a_turn_keeps_at_most_its_cap_of_records_and_counts_the_rest(tmp_path: Path) -> None:
    """Seventy read-only calls in one response run concurrently: the first 64 the model made are
    recorded, in the model's order, and the other 6 are counted."""
    activities, env = turn_activities(tmp_path), ActivityEnvironment()
    result = await env.run(
        activities.turn, TurnInput(task_id="t-many", agent="many-prices", turn=1, prompt="price all")
    )
    assert result.final_output == "priced everything"
    assert [r.call_id for r in result.tool_calls] == [f"call_{n}" for n in range(MAX_TOOL_CALL_RECORDS)]
    assert result.tool_calls_dropped == 70 - MAX_TOOL_CALL_RECORDS


async def test_effect_tools_are_not_recorded_as_read_only_calls(tmp_path: Path) -> None:
    """A sandbox tool stops the turn as a proposal; when the next turn hands it the workflow's
    result, that call is still not a read-only tool call."""
    activities, env = turn_activities(tmp_path), ActivityEnvironment()
    first = await env.run(
        activities.turn, TurnInput(task_id="t-fx", agent="counter", turn=1, prompt="count to 1")
    )
    [action] = first.proposed
    assert first.tool_calls == []
    output = json.dumps({"exit_code": 0, "stdout": "1\n", "stderr": ""})
    result = ActionResult(
        call_id=action.call_id, tool=action.tool, status=ActionStatus.EXECUTED, output=output
    )
    second = await env.run(
        activities.turn,
        TurnInput(
            task_id="t-fx",
            agent="counter",
            turn=2,
            prompt="count to 1",
            run_state_ref=first.run_state_ref,
            conversation_ref=first.conversation_ref,
            results=[result],
        ),
    )
    assert second.status == "final" and second.tool_calls == []
