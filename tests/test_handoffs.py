"""Handoffs end to end on a worker: a triage agent hands off (SDK ``handoff()``) to a specialist
that proposes a write; the specialist is named as proposer in status, events, evidence and the
inbox; a worker SIGKILLed between the handoff turn and the next one loses nothing, and the next
worker resumes on the specialist; an approver's edit is planned with the specialist's own tool.
Real dev server, real worker processes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.agent.registry import AgentRegistry, agent_graph, find_tool
from agent_worker.activities.agent.turn import AgentActivities
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.errors import ToolPlanError
from agent_worker.inbox import build_app, running_inbox
from agent_worker.inbox.pages import task_url
from agent_worker.schemas.actions import ActionResult, ActionStatus
from agent_worker.schemas.events import EventType
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.schemas.turns import TurnInput
from agent_worker.workflows import AgentTaskWorkflow
from agents import Agent, FunctionTool, handoff
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from tests.helpers.browser import fetch
from tests.helpers.handoff_agents import SPECIALIST, STAMPS, TRIAGE
from tests.helpers.support import (
    TEST_AGENTS,
    DevServer,
    TaskEnv,
    assert_replays,
    decision,
    make_config,
    running_worker,
    sigkill,
    worker_process,
)

HANDOFF_AGENTS = "tests.helpers.handoff_agents:registrations"
LEAD = {"X-Forwarded-User": "finance-lead"}


def handoff_spec(prompt: str) -> dict[str, Any]:
    return {"agent": TRIAGE, "prompt": prompt, "policy": {"default_approvers": ["finance-lead"]}}


def handoff_env(client: Client, dev_server: DevServer, tmp_path: Path) -> TaskEnv:
    config = make_config(tmp_path / "data", agents=[*TEST_AGENTS, HANDOFF_AGENTS])
    return TaskEnv(client=client, config=config, address=dev_server.address)


def test_find_tool_searches_every_agent_handoffs_reach_preferring_the_proposer() -> None:
    """Plain agents and ``handoff()`` objects are followed, a cycle ends, and of two tools with one
    name the proposing agent's wins (else the first in breadth-first order)."""

    def tool(name: str, owner: str) -> FunctionTool:
        async def invoke(_ctx: Any, _args: str) -> str:
            return owner

        return FunctionTool(name=name, description="", params_json_schema={}, on_invoke_tool=invoke)

    refunds = Agent(name="refunds", tools=[tool("refund", "refunds"), tool("lookup", "refunds")])
    billing = Agent(name="billing", tools=[tool("lookup", "billing")], handoffs=[handoff(refunds)])
    triage = Agent(name="triage", handoffs=[billing])
    refunds.handoffs = [triage]  # back to triage: a cycle
    assert [a.name for a in agent_graph(triage)] == ["triage", "billing", "refunds"]
    assert find_tool(triage, "refund") is refunds.tools[0]
    assert find_tool(triage, "lookup") is billing.tools[0]
    assert find_tool(triage, "lookup", owner="refunds") is refunds.tools[1]
    with pytest.raises(ToolPlanError, match="'triage', 'billing', 'refunds' has a tool 'wipe'"):
        find_tool(triage, "wipe")


@pytest.mark.parametrize("current_agent", [SPECIALIST, ""])
async def test_a_turn_that_starts_from_the_conversation_starts_on_the_task_s_current_agent(
    tmp_path: Path, current_agent: str
) -> None:
    """A turn past the rebase bound starts from the conversation, not the RunState: it runs on the
    agent the task is on (the specialist), where the start agent would take the run back."""
    config = make_config(tmp_path / "data", agents=[HANDOFF_AGENTS])
    activities = AgentActivities(
        AgentRegistry.from_import_paths(config.agents), LocalArtifactStore(config.artifact_dir), config
    )
    env = ActivityEnvironment()
    first = await env.run(
        activities.turn, TurnInput(task_id="t-rebase", agent=TRIAGE, turn=1, prompt="book: 7")
    )
    [action] = first.proposed
    assert (first.agent, action.agent) == (SPECIALIST, SPECIALIST)
    assert first.run_state_ref is not None, "after a handoff the RunState is kept"
    receipt = ActionResult(
        call_id=action.call_id,
        tool=action.tool,
        status=ActionStatus.EXECUTED,
        output='{"record_id": "rec-7"}',
    )
    second = await env.run(
        activities.turn,
        TurnInput(
            task_id="t-rebase",
            agent=TRIAGE,
            turn=2,
            prompt="book: 7",
            conversation_ref=first.conversation_ref,
            results=[receipt],
            current_agent=current_agent,
        ),
    )
    if current_agent:
        assert (second.final_output, second.agent) == ("specialist booked rec-7", SPECIALIST)
    else:  # tasks from before current_agent existed: the start agent, as before
        assert (second.final_output, second.agent) == ("triage answered after the handoff", TRIAGE)


async def test_a_specialist_reached_by_handoff_proposes_the_write_and_a_killed_worker_resumes_on_it(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """Triage hands off; the specialist's write waits for approval, named as the specialist's in
    status, events and the inbox page; the worker is SIGKILLed; the approver's edit arrives with no
    worker running; a new worker plans the edit with the specialist's tool, writes once, and the
    specialist (not triage) reads the receipt; the evidence's approval names the specialist; the
    history replays."""
    env = handoff_env(client, dev_server, tmp_path)
    async with worker_process(env, tmp_path / "worker-1.log") as first:
        handle = await env.start(handoff_spec("book: 1200"))
        status = await env.awaiting_approval(handle)
        [request] = status.pending
        assert request.action.tool == "book_entry" and request.action.agent == SPECIALIST
        assert request.action.operation.payload == {  # type: ignore[union-attr]
            "amount": 1200,
            "memo": "from triage",
            "planned_by": SPECIALIST,
        }
        assert status.current_agent == SPECIALIST

        app = build_app(env.client, auth="header", principal_header="X-Forwarded-User")
        async with running_inbox(app, "127.0.0.1:0") as url:
            page = await asyncio.to_thread(fetch, url + task_url(handle.id), headers=LEAD)
        assert page.status == 200 and request.version in page.body, page.body
        assert f'proposed by</dt><dd class="agent">{SPECIALIST}</dd>' in page.body

        await sigkill(first)

    # The edit waits in history while no worker runs; triage has no book_entry tool, so only the
    # specialist's can plan it.
    await handle.signal(
        AgentTaskWorkflow.submit_decision,
        decision(request, "edit", "finance-lead", edited_args={"amount": 4200}),
    )
    async with worker_process(env, tmp_path / "worker-2.log"):
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
        final_status = await handle.query(AgentTaskWorkflow.status)
    log = (tmp_path / "worker-2.log").read_text()[-3000:]
    assert result.phase is TaskPhase.COMPLETED, (result.reason, log)
    [write] = result.evidence.writes
    assert result.final_output == f"specialist booked {write.receipt.record_id}"
    assert write.confirmed is True
    assert env.business().count() == 1
    assert env.business().payload(write.operation_key) == {
        "amount": 4200,
        "memo": "from triage",
        "planned_by": SPECIALIST,
    }

    [approval] = result.evidence.approvals
    assert approval.request_id == request.request_id and approval.agent == SPECIALIST
    assert approval.edited_version is not None and approval.refused_reason is None
    assert final_status.current_agent == SPECIALIST

    events = final_status.last_events
    proposed = [e.data for e in events if e.type is EventType.ACTION_PROPOSED]
    requested = [e.data for e in events if e.type is EventType.APPROVAL_REQUESTED]
    decided = [e.data for e in events if e.type is EventType.APPROVAL_DECIDED]
    turns = [e.data.get("agent") for e in events if e.type is EventType.TURN_FINISHED]
    assert [(p["tool"], p["agent"]) for p in proposed] == [("book_entry", SPECIALIST)]
    assert [(r["request_id"], r["agent"]) for r in requested] == [(request.request_id, SPECIALIST)]
    assert [d["agent"] for d in decided] == [SPECIALIST]
    assert turns == [SPECIALIST, SPECIALIST], "both turns ended on the specialist"

    await assert_replays(env.client, handle.id)


async def test_an_own_effect_tool_of_a_specialist_reached_by_handoff_runs_once_after_approval(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """Only the specialist has the ``effect_tool``: its call, proposed after the handoff and
    approved, runs as ``tool.call`` with the specialist's function, once, and the specialist reads
    its output."""
    env = handoff_env(client, dev_server, tmp_path)
    async with running_worker(env.client, env.config):
        handle = await env.start(handoff_spec("stamp: paid"))
        [request] = (await env.awaiting_approval(handle)).pending
        assert (request.action.tool, request.action.agent) == ("stamp", SPECIALIST)
        await env.approve(handle)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "specialist: stamped paid"
    [effect] = result.evidence.tool_effects
    assert [key for key, memo in STAMPS if memo == "paid"] == [effect.operation_key]
