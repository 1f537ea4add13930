"""Budgets across a tree of tasks: a parent with a cost budget fans out three sub-tasks, which draw
shares of what it has left (not copies of its budget), so the tree's total spend stops at the budget;
a soft limit notifies once; at the hard limit the parent asks its named principal to extend the
budget, an approval like any other: approved, the task goes on; rejected, it hands off, explained.

Every model call goes to a real OpenAI-shaped HTTP server on loopback (``OpenAIStub``) and costs
money at the worker's configured prices: 1,000 input and 1,000 output tokens at $20 and $40 per
million, $0.06 a call. Real dev server, real worker."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_worker.schemas.tasks import Budgets, Reservation, TaskPhase, TaskResult, TaskStatus, Usage
from agent_worker.schemas.validation import InvalidPayload, parse_task_input
from agent_worker.workflows import AgentTaskWorkflow
from agent_worker.workflows.budgets import child_budgets, exhausted, left, share
from temporalio.client import Client, WorkflowUpdateFailedError

from tests.helpers.openai_stub import OpenAIStub, response_json
from tests.helpers.receivers import WebhookReceiver, webhook_receiver
from tests.helpers.support import (
    DevServer,
    TaskEnv,
    assert_replays,
    decision,
    make_config,
    run_cli,
    running_worker,
)

CALL_USD = 0.06
CHILDREN = ("call_a", "call_b", "call_c")


def priced_body(output: list[dict[str, Any]]) -> dict[str, Any]:
    """A Responses API answer with ``output`` that used 1,000 input and 1,000 output tokens."""
    body = response_json("unused")
    body["output"] = output
    body["usage"].update(input_tokens=1000, output_tokens=1000, total_tokens=2000)
    return body


def function_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_tree",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def tree_conversation(_path: str, body: Any) -> dict[str, Any]:
    """The parent (the agent with ``delegate``) fans out three sub-tasks, then reports how they
    ended; a sub-task (the agent with ``run_shell``) runs one more command every turn, for ever."""
    tools = {t.get("name") for t in body.get("tools") or []}
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    if "delegate" in tools:
        if not outputs:
            return priced_body(
                [function_call("delegate", {"agent": "shell", "task": "spend"}, c) for c in CHILDREN]
            )
        phases = sorted(json.loads(o["output"])["phase"] for o in outputs)
        return priced_body([message(f"sub-tasks ended: {', '.join(phases)}")])
    step = len(outputs) + 1
    return priced_body([function_call("run_shell", {"script": f"echo step {step}"}, f"call_step_{step}")])


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as running:
        yield running


@pytest.fixture
async def tree_env(
    client: Client, dev_server: DevServer, tmp_path: Path, receiver: WebhookReceiver
) -> AsyncIterator[tuple[TaskEnv, OpenAIStub]]:
    with OpenAIStub() as stub:
        stub.answer_with(tree_conversation)
        config = make_config(
            tmp_path / "data",
            **stub.settings(),
            price_input_per_mtok=20.0,
            price_output_per_mtok=40.0,
            notify_webhook_url=receiver.url,
        )
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        async with running_worker(client, config):
            yield env, stub


def tree_spec(max_cost_usd: float) -> dict[str, Any]:
    return {
        "agent": "manager",
        "prompt": "fan out three sub-tasks",
        "budgets": {
            "max_cost_usd": max_cost_usd,
            "soft_limit": 0.5,
            "extension": {"approvers": ["finance-lead"], "add_cost_usd": 0.5},
        },
    }


async def children_of(env: TaskEnv, task_id: str) -> list[TaskResult]:
    return [
        await env.client.get_workflow_handle(f"{task_id}/sub/{c}", result_type=TaskResult).result()
        for c in CHILDREN
    ]


def tree_spend(usage: Usage) -> float:
    return usage.cost_usd + usage.sub_task_cost_usd


async def extension_request(env: TaskEnv, handle: Any) -> TaskStatus:
    return await env.wait_status(
        handle, lambda s: any(r.action.tool == "budget.extend" for r in s.pending), within=180
    )


def check_children_drew_shares(children: list[TaskResult], status: TaskStatus, budget: float) -> None:
    """Each sub-task stopped at its share of what the parent had left after its first turn, the
    parent counts their spend as its own, and the tree stayed inside the budget."""
    share_usd = (budget - CALL_USD) / len(CHILDREN)
    for child in children:
        assert child.phase is TaskPhase.HANDED_OFF, child.reason
        assert child.reason and "max_cost_usd budget exhausted" in child.reason
        assert 0 < child.usage.cost_usd <= share_usd + 1e-9, (child.usage.cost_usd, share_usd)
        # It stopped because another turn would not fit, not one turn past its share.
        assert child.usage.cost_usd + CALL_USD > share_usd
    usage = status.usage
    assert usage.cost_usd == pytest.approx(CALL_USD)  # the parent's own first turn
    assert usage.sub_tasks == len(CHILDREN)
    assert usage.sub_task_cost_usd == pytest.approx(sum(c.usage.cost_usd for c in children))
    assert tree_spend(usage) <= budget + 1e-9
    # Copies of the budget would have let each child spend up to all of it.
    assert tree_spend(usage) + CALL_USD > budget


async def test_a_fan_out_stops_at_the_parent_s_budget_and_an_approved_extension_lets_it_continue(
    tree_env: tuple[TaskEnv, OpenAIStub], receiver: WebhookReceiver, capsys: pytest.CaptureFixture[str]
) -> None:
    """$1.00: the parent's first turn ($0.06) delegates three sub-tasks, each drawing a third of the
    $0.94 left; each stops when another turn would pass its share ($0.30 of $0.313). The parent,
    at $0.96 with a $0.06 turn ahead, asks finance-lead for $0.50 more; someone else may not grant
    it; finance-lead does, and the parent's next turn completes the task inside the new $1.50."""
    env, _stub = tree_env
    handle = await env.start(tree_spec(1.0))
    status = await extension_request(env, handle)
    children = await children_of(env, handle.id)
    check_children_drew_shares(children, status, 1.0)
    assert status.phase is TaskPhase.AWAITING_APPROVAL
    [request] = status.pending
    assert request.approvers == ["finance-lead"]
    assert request.action.arguments["budget"] == "max_cost_usd"
    assert request.action.arguments["add"] == 0.5
    assert request.action.arguments["used"] == pytest.approx(tree_spend(status.usage))
    assert "max_cost_usd budget exhausted" in request.reason
    # The soft limit (50%) was passed while the sub-tasks ran: one notice, to the extension's approver.
    budget_posts = [b for _, b in receiver.posts if b["agent_worker"]["kind"] == "budget"]
    assert len(budget_posts) == 1
    assert budget_posts[0]["agent_worker"]["budget"]["budget"] == "max_cost_usd"
    assert budget_posts[0]["agent_worker"]["recipients"] == ["finance-lead"]
    assert "past 50% of its limit" in budget_posts[0]["text"]

    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(AgentTaskWorkflow.decide, decision(request, "approve", "intern"))
    outcome = await handle.execute_update(
        AgentTaskWorkflow.decide, decision(request, "approve", "finance-lead")
    )
    assert outcome.accepted
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "sub-tasks ended: handed_off, handed_off, handed_off"
    assert tree_spend(result.usage) == pytest.approx(tree_spend(status.usage) + CALL_USD)
    assert tree_spend(result.usage) <= 1.5
    [granted] = result.evidence.approvals
    assert (granted.tool, granted.principal, granted.decision.value) == (
        "budget.extend",
        "finance-lead",
        "approve",
    )
    final = await handle.query(AgentTaskWorkflow.status)
    assert final.budgets.max_cost_usd == pytest.approx(1.5)
    types = [e.type.value for e in final.last_events]
    assert "budget.extended" in types and "budget.soft_limit" in types
    await assert_replays(env.client, handle.id)
    # `report` over the tree: the parent's one accepted deliverable at its own cost; the sub-tasks,
    # handed off at their shares, three wasted ones.
    rows = await report_rows(capsys, env, tasks=4)
    assert rows["manager"]["accepted"] == 1 and rows["manager"]["tasks"] == 1
    assert rows["manager"]["cost_per_accepted_usd"] == pytest.approx(result.usage.cost_usd)
    assert result.usage.cost_usd == pytest.approx(2 * CALL_USD)
    assert rows["shell"]["phases"] == {"handed_off": 3} and rows["shell"]["accepted"] == 0
    assert rows["shell"]["cost_usd"] == pytest.approx(result.usage.sub_task_cost_usd)
    assert rows["shell"]["cost_per_accepted_usd"] is None


async def report_rows(capsys: pytest.CaptureFixture[str], env: TaskEnv, *, tasks: int) -> dict[str, Any]:
    """`agent-worker report --json` over the env's queue, by agent, once it counts ``tasks`` tasks."""
    deadline = time.monotonic() + 30
    while True:  # visibility lists closed tasks eventually
        args = ("report", "--since", "1h", "--task-queue", env.task_queue, "--json")
        code, out, err = await run_cli(capsys, "--address", env.address, *args)
        assert code == 0, err
        rows = {row["agent"]: row for row in map(json.loads, out.splitlines())}
        if sum(row["tasks"] for row in rows.values()) == tasks:
            return rows
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.5)


async def test_a_rejected_extension_hands_the_task_off(tree_env: tuple[TaskEnv, OpenAIStub]) -> None:
    """$0.28: three sub-tasks of one turn each ($0.24 in all); the parent cannot fit another turn,
    asks for more, and finance-lead rejects: the task hands off saying why, with no turn past it."""
    env, stub = tree_env
    handle = await env.start(tree_spec(0.28))
    status = await extension_request(env, handle)
    check_children_drew_shares(await children_of(env, handle.id), status, 0.28)
    [request] = status.pending
    requests_before = len(stub.requests)
    await handle.signal(
        AgentTaskWorkflow.submit_decision,
        decision(request, "reject", "finance-lead", reason="the quarter's budget is spent"),
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason is not None
    assert "max_cost_usd budget exhausted" in result.reason
    assert f"extension {request.request_id} not granted" in result.reason
    assert "the quarter's budget is spent" in result.reason
    assert len(stub.requests) == requests_before  # no model call after the rejection
    assert tree_spend(result.usage) <= 0.28 + 1e-9
    await assert_replays(env.client, handle.id)


def test_shares_are_taken_from_what_is_left_after_running_siblings() -> None:
    """Pure arithmetic: three starting sub-tasks split $0.90 equally; a second batch sees what the
    first's still-running reservations leave; nothing left means no sub-task starts."""
    budgets = Budgets(max_cost_usd=1.0, max_tokens=10_000, max_model_calls=30)
    usage = Usage(cost_usd=0.1, input_tokens=1000, model_calls=3)
    first = share(left(budgets, usage, []), 3)
    assert first is not None and first.cost_usd == pytest.approx(0.3)
    assert (first.tokens, first.model_calls) == (3000, 9)
    running = [first, first]
    third = share(left(budgets, usage, running), 1)
    assert third is not None and third.cost_usd == pytest.approx(0.3) and third.tokens == 3000
    assert share(left(budgets, usage, [*running, first]), 1) is None  # all of it is held
    child = child_budgets(budgets, Reservation(cost_usd=0.3, tokens=3000, model_calls=9), wall_left=None)
    assert (child.max_cost_usd, child.max_tokens, child.max_model_calls) == (0.3, 3000, 9)
    assert child.extension is None and child.max_turns == budgets.max_turns


def test_a_turn_starts_only_when_what_is_left_covers_the_costliest_turn() -> None:
    budgets = Budgets(max_cost_usd=0.3)
    usage = Usage(cost_usd=0.25, costliest_turn_usd=0.06, sub_task_cost_usd=0.0)
    assert exhausted(budgets, usage, 0.0) is None  # without looking ahead: room left
    ahead = exhausted(budgets, usage, 0.0, tree=True, ahead=True)
    assert ahead is not None and ahead.budget == "max_cost_usd"
    assert "the next turn may take 0.06" in ahead.reason
    rolled = Usage(cost_usd=0.1, sub_task_cost_usd=0.2)
    assert exhausted(budgets, rolled, 0.0) is None  # a copy-budget task ignores its children
    used_up = exhausted(budgets, rolled, 0.0, tree=True)
    assert used_up is not None and used_up.used == pytest.approx(0.3)


def test_an_extension_that_adds_nothing_is_refused_naming_the_fields() -> None:
    spec = {"agent": "manager", "prompt": "p", "budgets": {"extension": {"approvers": ["finance-lead"]}}}
    with pytest.raises(InvalidPayload, match=r"spec\.budgets\.extension: .*add_cost_usd, add_tokens"):
        parse_task_input(spec)
    spec["budgets"]["extension"] = {"approvers": [], "add_cost_usd": 1.0}
    with pytest.raises(InvalidPayload, match=r"spec\.budgets\.extension\.approvers"):
        parse_task_input(spec)
