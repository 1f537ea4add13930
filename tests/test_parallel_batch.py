"""Parallel batches: the allowed commands of one model response run concurrently, and by default
before the task waits for the approval its gated write needs, so `status` shows their results beside
the request; with `allowed_first` off, everything runs after the decision (still concurrently).
Real Docker tier, real dev server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agent_worker.schemas.actions import ActionStatus
from agent_worker.schemas.tasks import TaskPhase, TaskResult, TaskStatus

from tests.helpers.matrix import Record
from tests.helpers.support import TaskEnv, assert_replays


def batch_spec(allowed_first: bool = True, count: int = 2, seconds: int = 5) -> dict[str, Any]:
    return {
        "agent": "batcher",
        "prompt": f"batch of {count} sleeping {seconds}",
        "policy": {"default_approvers": ["finance-lead"], "allowed_first": allowed_first},
    }


def intervals(result: TaskResult) -> list[tuple[float, float]]:
    """When each command ran, as it printed it: (start, end), seconds since the epoch."""
    spans = []
    for command in result.evidence.commands:
        start, end = command.stdout.split()
        spans.append((float(start), float(end)))
    return spans


def overlap(spans: list[tuple[float, float]]) -> bool:
    (a_start, a_end), (b_start, b_end) = spans
    return a_start < b_end and b_start < a_end


async def test_allowed_commands_run_concurrently_before_the_approval_and_status_shows_them(
    docker_env: TaskEnv, record_property: Record
) -> None:
    """Two 5 s commands and a gated write in one response: both commands have run, overlapping in
    time, while the write still waits; `status` shows the prompt, the batch and both results before
    the decision; approved, the write lands once."""
    env = docker_env
    started = time.monotonic()
    handle = await env.start(batch_spec())

    def ran_and_waiting(status: TaskStatus) -> bool:
        states = {view.call_id: view.state for view in status.batch}
        return bool(status.pending) and all(
            states.get(f"call_cmd_{i}") is ActionStatus.EXECUTED for i in range(2)
        )

    status = await env.wait_status(handle, ran_and_waiting, within=90)
    commands_done = time.monotonic() - started
    assert status.phase is TaskPhase.AWAITING_APPROVAL
    assert status.prompt == "batch of 2 sleeping 5"
    [request] = status.pending
    assert request.action.tool == "record_value"
    views = {view.call_id: view for view in status.batch}
    assert views["call_write"].state == "waiting" and views["call_write"].request_id == request.request_id
    for i in range(2):
        assert views[f"call_cmd_{i}"].output and '"exit_code": 0' in views[f"call_cmd_{i}"].output
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "saw 3 results"
    spans = intervals(result)
    assert overlap(spans), spans
    assert len(result.evidence.writes) == 1 and result.evidence.writes[0].confirmed is True
    record_property(
        "observed",
        f"both 5 s commands done {commands_done:.1f} s after start; overlap "
        f"{min(s[1] for s in spans) - max(s[0] for s in spans):.1f} s",
    )
    await assert_replays(client=env.client, workflow_id=handle.id)


async def test_with_allowed_first_off_every_action_waits_for_the_decision(docker_env: TaskEnv) -> None:
    """`allowed_first: false` keeps the old order: nothing runs while the approval waits; after it,
    the commands still run concurrently and the write lands once."""
    env = docker_env
    handle = await env.start(batch_spec(allowed_first=False, seconds=3))
    status = await env.awaiting_approval(handle)
    await asyncio.sleep(1)  # time enough for an allowed command to have started, were it to
    status = await env.wait_status(handle, lambda s: bool(s.pending))
    states = {view.call_id: view.state for view in status.batch}
    assert states == {"call_cmd_0": "pending", "call_cmd_1": "pending", "call_write": "waiting"}
    assert status.usage.actions == 0
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert overlap(intervals(result))
    assert len(result.evidence.writes) == 1
    await assert_replays(client=env.client, workflow_id=handle.id)
