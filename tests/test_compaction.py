"""Context compaction: a conversation past its agent's token budget is compacted before the turn (one
journaled model call summarizing the older items), keeps call/output pairs together, and lets a long
task finish against a model server that refuses requests past its context limit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from agent_worker.activities.agent.compaction import SUMMARY_PREFIX, estimate_tokens, split_point
from agent_worker.activities.agent.registry import AgentRegistry
from agent_worker.activities.agent.turn import AgentActivities
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.events import JsonlEventSink
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.actions import ActionResult, ActionStatus
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.schemas.turns import TurnInput, TurnResult
from temporalio.testing import ActivityEnvironment

from tests.helpers.compaction_agent import BUDGET, LimitedStub, StepScript
from tests.helpers.support import (
    TEST_AGENTS,
    DevServer,
    TaskEnv,
    assert_replays,
    make_config,
    run_ids,
    running_worker,
)

AGENTS = [*TEST_AGENTS, "tests.helpers.compaction_agent:registrations"]


def conversation(pairs: int) -> list[dict]:
    """A prompt, then pairs of calls and outputs, some with a reasoning item and a message before."""
    items: list[dict] = [{"role": "user", "content": "count 99 steps"}]
    for n in range(1, pairs + 1):
        if n % 3 == 0:
            items.append({"type": "reasoning", "id": f"rs_{n}", "summary": []})
        if n % 4 == 0:
            items.append({"role": "assistant", "content": f"on to {n}"})
        items.append({"type": "function_call", "call_id": f"c{n}", "name": "run_shell", "arguments": "{}"})
        if n % 5 == 0:  # a parallel call: two calls, then both outputs
            items.append(
                {"type": "function_call", "call_id": f"d{n}", "name": "run_shell", "arguments": "{}"}
            )
            items.append({"type": "function_call_output", "call_id": f"d{n}", "output": "x" * 50})
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": "y" * (40 * n)})
    return items


def test_the_split_never_parts_a_call_from_its_output_or_a_reasoning_item_from_what_follows() -> None:
    items = conversation(30)
    for keep in range(0, estimate_tokens(items) + 50, 7):
        split = split_point(items, keep, head=1)
        assert 1 <= split <= len(items) - 1 or split == 1
        older = {i.get("call_id") for i in items[1:split]} - {None}
        recent = {i.get("call_id") for i in items[split:]} - {None}
        assert not older & recent, (keep, split, older & recent)
        assert items[split - 1].get("type") != "reasoning", (keep, split)
        assert split < len(items), "at least the last item is kept"


def step_result(action_call: str, n: int) -> ActionResult:
    output = json.dumps({"exit_code": 0, "stdout": f"step {n}\n" + "x" * 300, "stderr": ""})
    return ActionResult(call_id=action_call, tool="run_shell", status=ActionStatus.EXECUTED, output=output)


async def test_a_retried_turn_answers_the_compaction_call_from_the_journal(tmp_path: Path) -> None:
    """Turns of the step counter until one compacts its conversation; run again (a retry), that turn
    answers the summary call and its own call from the journal, making no model call, and starts
    from the same compacted conversation, which keeps the progress (the agent goes on at the next
    step) and holds the replaced items whole in the artifact store."""
    config = make_config(tmp_path / "data", agents=AGENTS)
    store = LocalArtifactStore(config.artifact_dir)
    activities = AgentActivities(AgentRegistry.from_import_paths(AGENTS), store, config)
    env = ActivityEnvironment()
    conversation_ref, results, turn = None, [], 0
    compacted: TurnResult | None = None
    while compacted is None:
        turn += 1
        assert turn < 40, "no turn compacted"
        turn_input = TurnInput(
            task_id="t-compact",
            agent="step-counter",
            turn=turn,
            prompt="count 99 steps",
            conversation_ref=conversation_ref,
            results=results,
        )
        result = await env.run(activities.turn, turn_input)
        [action] = result.proposed
        assert action.call_id == f"call_step_{turn}", "the agent lost count"
        if result.compacted is not None:
            compacted = result
            break
        conversation_ref, results = result.conversation_ref, [step_result(action.call_id, turn)]
    record = compacted.compacted
    assert record is not None and record.tokens_after < record.tokens_before
    assert record.tokens_before > BUDGET >= record.tokens_after
    assert compacted.usage.model_calls == 2 and compacted.usage.replayed_calls == 0
    assert record.replaced in compacted.artifacts
    replaced = json.loads(store.get(record.replaced.digest))
    assert len(replaced) == record.replaced_items and replaced[0]["type"] == "function_call"
    started_from = store.get_json(record.conversation_ref)
    assert started_from[0] == {"role": "user", "content": "count 99 steps"}
    assert started_from[1]["content"].startswith(SUMMARY_PREFIX)
    assert record.replaced.digest in started_from[1]["content"]
    # The conversation the task goes on with begins with the compacted one.
    stored = store.get_json(compacted.conversation_ref)
    assert stored[: len(started_from)] == started_from

    calls_before = len(StepScript.calls)
    retried = await env.run(activities.turn, turn_input)
    assert len(StepScript.calls) == calls_before, "a retried turn called the model again"
    assert retried.usage.replayed_calls == retried.usage.model_calls == 2
    assert retried.compacted == record
    assert retried.conversation_ref == compacted.conversation_ref
    assert retried.proposed == compacted.proposed


@pytest.mark.parametrize("worker_budget", [None, BUDGET])
async def test_an_agent_without_a_budget_of_its_own_follows_the_worker_setting(
    tmp_path: Path, worker_budget: int | None
) -> None:
    """An agent with no compact_after_tokens is compacted under the worker's compact_after_tokens,
    and never when that is unset too."""
    config = make_config(tmp_path / "data", agents=AGENTS, compact_after_tokens=worker_budget)
    activities = AgentActivities(
        AgentRegistry.from_import_paths(AGENTS), LocalArtifactStore(config.artifact_dir), config
    )
    env = ActivityEnvironment()
    conversation_ref, results, compactions = None, [], 0
    for turn in range(1, 16):
        result = await env.run(
            activities.turn,
            TurnInput(
                task_id=f"t-default-{worker_budget}",
                agent="step-counter-default",
                turn=turn,
                prompt="count 99 steps",
                conversation_ref=conversation_ref,
                results=results,
            ),
        )
        [action] = result.proposed
        assert action.call_id == f"call_step_{turn}"
        compactions += result.compacted is not None
        conversation_ref, results = result.conversation_ref, [step_result(action.call_id, turn)]
    assert (compactions > 0) is (worker_budget is not None), compactions


@pytest.fixture
def limited_stub() -> Iterator[LimitedStub]:
    with LimitedStub(max_tokens=2 * BUDGET) as server:
        yield server


@pytest.fixture
async def stub_env(
    client, dev_server: DevServer, tmp_path: Path, limited_stub: LimitedStub
) -> AsyncIterator[TaskEnv]:
    config = make_config(
        tmp_path / "data",
        agents=AGENTS,
        **limited_stub.settings(),
        process_isolation="none",
        sandbox_unsafe_dev=True,
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        yield env


TURNS = 200


async def test_a_200_turn_task_completes_against_a_context_limit_with_compaction_events_and_verified_evidence(
    stub_env: TaskEnv,
    limited_stub: LimitedStub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 200-turn task whose conversation would pass the server's context limit within its first
    twenty turns completes across continue-as-new: no request passed the limit, the task emitted
    compaction events, and `agent-worker verify` passes on its evidence (the replaced items among
    its artifacts)."""
    env = stub_env
    n = TURNS
    budgets = {
        "max_turns": n + 5,
        "max_actions": n + 5,
        "max_model_calls": 2 * n,
        "max_sandbox_seconds": 3600,
    }
    handle = await env.start(
        {
            "agent": "step-counter-http",
            "prompt": f"count {n} steps",
            "budgets": budgets,
            "continue_as_new_after_events": 1000,
        }
    )
    result: TaskResult = await asyncio.wait_for(handle.result(), 900)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == f"counted {n} steps"
    assert limited_stub.refused == 0 and limited_stub.largest <= 2 * BUDGET
    events = [e for e in JsonlEventSink(env.config.events_dir).read(handle.id)]
    compactions = [e.data for e in events if e.type.value == "context.compacted"]
    assert len(compactions) >= n // 20, len(compactions)
    assert all(c["tokens_after"] < c["tokens_before"] for c in compactions)
    runs = await run_ids(env.client, handle.id)
    assert len(runs) >= 2, "the task should have continued as new"
    # Compaction happens inside the turns: every run replays, and the last (shortest) is kept.
    for run in runs:
        await assert_replays(env.client, handle.id, run, keep=run == runs[-1])
    with capsys.disabled():
        print(
            f"\n{n} turns: {len(compactions)} compactions, {len(runs)} runs, largest request "
            f"{limited_stub.largest} tokens (limit {2 * BUDGET}), {result.usage.model_calls} model calls"
        )

    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    bundle = tmp_path / "bundle"
    code = await asyncio.to_thread(
        cli_main, ["--address", env.address, "evidence", handle.id, "-o", str(bundle)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = {a["name"] for a in manifest["evidence"]["artifacts"]}
    assert any(name.endswith("-compacted.json") for name in names) or manifest["evidence"].get("archived")
    code = await asyncio.to_thread(cli_main, ["verify", str(bundle)])
    out = capsys.readouterr().out
    assert code == 0, out
