"""A flood of stale decisions through the documented decision path (the update ``decide``, which the
CLI, the inbox, the HTTP API and ``AgentWorkerClient`` send), on a loaded machine, to a worker that
keeps the SDK's own deadlock window (2 s): the task is neither wedged nor changed, and the flood
leaves nothing in its history (issue 43, item 4).

A refused update is never written to history, so unlike a flood of signals (``tests/test_bounds.py``)
it builds no backlog that a later replay must get through in one activation."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from agent_worker.schemas.tasks import TaskPhase
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from tests.helpers.load import loaded_to
from tests.helpers.support import TaskEnv, spawn_worker
from tests.test_bounds import STALE, assert_no_workflow_task_failed, recorder

FLOOD_SIZE = 10_000
IN_FLIGHT = 40  # as the signal flood
# The 1-minute load average the flood meets (issue 43: the SDK's own deadlock window at load 5).
FLOOD_LOAD = 5.0
# A worker busy with the flood, or starved by the load, answers late: the server then gives up
# waiting (a timeout), refuses more updates in flight for the task for a moment, or aborts an update
# whose workflow task it dropped ("workflow update was aborted", UNAVAILABLE: Temporal's word for
# "send it again"); the call is sent again. Any other error fails the test.
ASK_AGAIN = {
    RPCStatusCode.CANCELLED,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.UNAVAILABLE,
}
# How long, after the flood, the task has to take the real decision and complete (a liveness bound
# for a wedged task, not a measurement).
SETTLE_SECONDS = 300
T = TypeVar("T")


async def answered(call: Callable[[], Awaitable[T]], deadline: float) -> T:
    """``call``'s answer, sending it again while the server gives up waiting for a busy worker, until
    ``deadline`` (monotonic)."""
    while True:
        try:
            return await call()
        except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            if isinstance(err, RPCError) and err.status not in ASK_AGAIN:
                raise
            assert time.monotonic() < deadline, f"no answer before the deadline: {err}"
            await asyncio.sleep(0.5)


async def test_ten_thousand_stale_updates_on_a_loaded_machine_leave_the_task_as_it_was(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """10,000 stale-version decisions sent by update, 40 in flight, while the machine is kept at a
    load average of 5 or more and the worker keeps the SDK's own 2 s deadlock window: every one is
    refused naming the stale version, no workflow task fails, none reaches history or the task's
    state, and the real approval sent after them completes the task with one write."""
    env = config_env
    async with loaded_to(FLOOD_LOAD):
        worker = spawn_worker(env, tmp_path / "worker.log", AGENT_WORKER_WORKFLOW_DEADLOCK_WINDOW_SECONDS="0")
        try:
            await flood_by_update_then_approve(env)
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


async def flood_by_update_then_approve(env: TaskEnv) -> None:
    handle = await env.start(recorder("update-flood-1"))
    [request] = (await env.awaiting_approval(handle)).pending
    bogus = {
        "request_id": request.request_id,
        "version": STALE,
        "decision": "approve",
        "principal": "finance-lead",
    }
    quiet_events = len((await handle.fetch_history()).events)
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def send() -> str:
        async with gate:
            try:
                await answered(lambda: decide(handle, bogus), time.monotonic() + SETTLE_SECONDS)
            except WorkflowUpdateFailedError as err:
                return str(err.cause or err)
            raise AssertionError("a stale decision was accepted")

    load = os.getloadavg()[0]
    assert load >= FLOOD_LOAD, f"the flood must meet a loaded machine (load average {load:.2f})"
    print(f"load average {load:.2f} as the flood starts", flush=True)
    # Every call is let finish (none left running after a failure), then each answer is checked.
    answers = await asyncio.gather(*(send() for _ in range(FLOOD_SIZE)), return_exceptions=True)
    print(f"load average {os.getloadavg()[0]:.2f} after the flood", flush=True)
    errors = [a for a in answers if not isinstance(a, str)]
    assert not errors, f"{len(errors)} calls failed, the first: {errors[0]!r}"
    assert all("stale version" in a for a in answers), next(a for a in answers if "stale version" not in a)

    real = {**bogus, "version": request.version}
    outcome = await answered(lambda: decide(handle, real), time.monotonic() + SETTLE_SECONDS)
    assert outcome.accepted is True, outcome
    result = await asyncio.wait_for(handle.result(), SETTLE_SECONDS)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert env.business().count() == 1
    await assert_no_workflow_task_failed(handle)
    history = (await handle.fetch_history()).events
    accepted = [e for e in history if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    assert len(accepted) == 1, f"{len(accepted)} updates in history: only the real one belongs there"
    # What came after the request is the task finishing, as quiet as a task nobody flooded.
    assert len(history) - quiet_events < 100, f"{len(history) - quiet_events} events after the flood"
    status = await handle.query(AgentTaskWorkflow.status)
    assert status.ignored_count == 0  # refused before history: nothing to record


async def decide(handle: WorkflowHandle[Any, Any], decision: dict[str, Any]) -> Any:
    return await handle.execute_update(AgentTaskWorkflow.decide, decision)
