"""Delivery accounting against a real dev server: a task's time splits into working and waiting for a
human (status and result agree with the wall clock), and `agent-worker report` over approved, rejected
and handed-off tasks gives the right counts, acceptance rate and cost per accepted deliverable."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from tests.helpers.support import TaskEnv, example_spec, run_cli

WAIT = 3.0


async def test_time_waiting_for_the_approval_is_told_apart_from_time_working(env: TaskEnv) -> None:
    """The approver answers after about 3 s: the result's usage counts about 3 s waiting, the rest
    working, and together they stay within the task's wall-clock time."""
    started = time.monotonic()
    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    await asyncio.sleep(WAIT)
    waiting_now = (await handle.query(AgentTaskWorkflow.status)).usage.waiting_seconds
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    wall = time.monotonic() - started
    usage = result.usage
    assert result.phase is TaskPhase.COMPLETED
    assert waiting_now == 0.0  # counted when the wait ends
    assert WAIT - 0.5 <= usage.waiting_seconds <= wall
    assert 0.0 < usage.active_seconds < wall - WAIT + 0.5
    assert usage.active_seconds + usage.waiting_seconds <= wall + 0.5


async def test_report_counts_accepted_and_wasted_deliveries_per_agent(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """One approved (accepted), one rejected with `on_reject: end`, one handed off at its approval
    deadline: the report names 3 tasks, 1 accepted (a third), each phase once, and the cost per
    accepted deliverable is the total cost over the one accepted."""
    approved = await env.start(example_spec())
    await env.approve(approved)
    rejected_spec = example_spec()
    rejected_spec["policy"]["on_reject"] = "end"
    rejected = await env.start(rejected_spec)
    [request] = (await env.awaiting_approval(rejected)).pending
    outcome = await rejected.execute_update(
        AgentTaskWorkflow.decide,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "reject",
            "principal": "finance-lead",
            "reason": "wrong month",
        },
    )
    assert outcome.accepted
    expiring = example_spec()
    expiring["budgets"] = {**expiring.get("budgets", {}), "approval_timeout_seconds": 1}
    handed_off = await env.start(expiring)
    results = [await asyncio.wait_for(h.result(), 60) for h in (approved, rejected, handed_off)]
    assert [r.phase for r in results] == [TaskPhase.COMPLETED, TaskPhase.REJECTED, TaskPhase.HANDED_OFF]

    deadline = time.monotonic() + 30
    while True:  # visibility lists closed tasks eventually
        code, out, err = await run_cli(
            capsys,
            "--address",
            env.address,
            "report",
            "--since",
            "1h",
            "--task-queue",
            env.task_queue,
            "--json",
        )
        assert code == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        if rows and rows[0]["tasks"] == 3:
            break
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.5)
    [row] = rows
    assert row["agent"] == "monthly-report"
    assert row["accepted"] == 1 and abs(row["acceptance_rate"] - 1 / 3) < 1e-9
    assert row["phases"] == {"completed": 1, "rejected": 1, "handed_off": 1}
    total = sum(r.usage.cost_usd for r in results)
    assert row["cost_usd"] == pytest.approx(total) and row["cost_per_accepted_usd"] == pytest.approx(total)
    assert row["waiting_seconds"] == pytest.approx(sum(r.usage.waiting_seconds for r in results))
    assert 0 < row["end_to_end_p50_seconds"] <= row["end_to_end_p95_seconds"]
