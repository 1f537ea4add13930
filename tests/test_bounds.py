"""Every entry point that carries client or model data, at its maximum and under a flood: the task
completes, or ends ``handed_off`` naming the limit, and no workflow task ever fails on the worker's
side (a failing one would fail again on every retry: the task would be stuck for good)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from agent_worker.activities.events import JsonlEventSink
from agent_worker.schemas.approvals import MAX_EDITED_ARGS_BYTES, MAX_PRINCIPAL_CHARS, DecisionOutcome
from agent_worker.schemas.tasks import TaskPhase
from agent_worker.workflows import AgentTaskWorkflow
from agent_worker.workflows.bounds import MAX_PAYLOAD_BYTES, MAX_SPEC_BYTES
from agent_worker.workflows.inputs import MAX_PENDING_FOLLOW_UP_BYTES
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from agent_worker.plugin import DEADLOCK_WINDOW
from tests.helpers.support import TaskEnv, assert_replays, spawn_worker

STALE = "sha256:" + "0" * 64
# Answers that say "ask again": a server that gave up waiting for a busy worker, and (resource
# exhausted, "workflow is closing") a run that is continuing as new right then, which 10,000 signals'
# history makes it do: the next ask reaches the new run.
TIMED_OUT = {RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED}
T = TypeVar("T")


def recorder(value: str, **extra: Any) -> dict[str, Any]:
    """A task that records ``value`` once finance-lead approves."""
    return {
        "agent": "recorder",
        "prompt": f"record: {value}",
        "policy": {"default_approvers": ["finance-lead"]},
        **extra,
    }


async def assert_no_workflow_task_failed(
    handle: WorkflowHandle[Any, Any], *, server_force_closes: bool = False
) -> None:
    """Not one workflow task of the task's run failed or timed out.

    With ``server_force_closes``, the one failure a flood may bring is let through: the server's
    own force-close of a workflow task in flight while more than 100 events were buffered for it
    (``history.maximumBufferedEventsBatch``; cause ``FORCE_CLOSE_COMMAND``, identity
    ``history-service``). The server flushes the buffer into history and schedules the task again,
    so nothing is lost; which workflow task meets it is timing. A failure the worker reports, or a
    timeout, still fails the check."""
    history = await handle.fetch_history()
    stuck = {EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED, EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT}
    failed = [e for e in history.events if e.event_type in stuck]
    if server_force_closes:
        closed = [e for e in failed if _server_force_close(e)]
        if closed:
            print(f"{len(closed)} workflow task(s) force-closed by the server's buffered-event limit")
        failed = [e for e in failed if not _server_force_close(e)]
    assert not failed, failed[0]


def _server_force_close(event: Any) -> bool:
    attrs = event.workflow_task_failed_event_attributes
    return (
        event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        and attrs.cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND
        and attrs.identity == "history-service"
    )


async def decide(handle: WorkflowHandle[Any, Any], **decision: Any) -> DecisionOutcome:
    return await handle.execute_update(AgentTaskWorkflow.decide, decision)


async def test_ten_thousand_bogus_decisions_neither_wedge_the_task_nor_hide_the_real_one(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """10,000 stale-version decisions sent as fast as 40 in flight allow, then a valid approval: the
    task completes with one write, no workflow task failed on the worker's side (the server may
    force-close one that more than 100 signals arrived during, and retries it), and every bogus one
    is counted. The worker runs in its own process, as in production (and so a wedged one is killed,
    not waited for)."""
    env = config_env
    worker = spawn_worker(env, tmp_path / "worker.log")
    try:
        await flood_then_approve(env)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    # The worker ran its activations with our deadlock window, as the SDK held it (the worker logs
    # it at start, read through activities.sdk_shims.deadlock_window_seconds), not the SDK's 2 s.
    window = DEADLOCK_WINDOW.total_seconds()
    started = [
        line for line in (tmp_path / "worker.log").read_text().splitlines() if "worker started" in line
    ]
    assert started and re.search(rf"deadlock_window_seconds\W+{window:g}(\.0)?\b", started[0]), started


async def flood_then_approve(env: TaskEnv) -> None:
    handle = await env.start(recorder("flood-1"))
    [request] = (await env.awaiting_approval(handle)).pending
    bogus = {
        "request_id": request.request_id,
        "version": STALE,
        "decision": "approve",
        "principal": "finance-lead",
    }
    gate = asyncio.Semaphore(40)

    async def send() -> None:
        async with gate:
            await handle.signal(AgentTaskWorkflow.submit_decision, bogus)

    started = time.monotonic()
    await asyncio.gather(*(send() for _ in range(10_000)))
    print(f"10,000 signals sent in {time.monotonic() - started:.1f} s")
    last_signal = time.monotonic()
    # The request is the one read before the flood (nothing can change its version). The worker may
    # still be working through the backlog: a call that times out waiting for it is sent again, and
    # the task must still complete within 120 s of the last signal.
    real = {**bogus, "version": request.version}
    outcome = await within_deadline(
        lambda: handle.execute_update(AgentTaskWorkflow.decide, real), last_signal + 120
    )
    assert outcome.accepted is True, outcome
    result = await asyncio.wait_for(handle.result(), 120 - (time.monotonic() - last_signal))

    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert env.business().count() == 1
    await assert_no_workflow_task_failed(handle, server_force_closes=True)
    status = await within_deadline(lambda: handle.query(AgentTaskWorkflow.status), time.monotonic() + 60)
    assert status.ignored_count == 10_000
    assert len(status.ignored) <= 100 and all("stale version" in i.reason for i in status.ignored)
    # The sink has them one by one while it keeps up, and the rest summed up, none dropped.
    sink = JsonlEventSink(env.config.events_dir)
    events = [e for e in sink.read(handle.id) if e.type.value == "approval.ignored"]
    assert sum(e.data.get("count", 1) for e in events) == 10_000


async def within_deadline(call: Callable[[], Awaitable[T]], deadline: float) -> T:
    """``call``'s answer, asking again while the server gives up waiting for a busy worker (an RPC
    timeout is not an answer) until ``deadline`` (monotonic) passes."""
    while True:
        try:
            return await call()
        except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            if isinstance(err, RPCError) and err.status not in TIMED_OUT:
                raise
            assert time.monotonic() < deadline, f"no answer before the deadline: {err}"
            print(f"asked again after: {err!r}")
            await asyncio.sleep(0.5)


async def test_decision_fields_at_and_past_their_maximum_are_refused_small_and_the_task_completes(
    env: TaskEnv,
) -> None:
    """Principals of the maximum length (not an approver) and of 1.4 MB (past it), three times
    each: each is ignored, what is kept of it is cut, and the real approval still completes the task."""
    handle = await env.start(recorder("fields-1"))
    [request] = (await env.awaiting_approval(handle)).pending
    for principal in ["p" * MAX_PRINCIPAL_CHARS, "q" * 1_400_000] * 3:
        await handle.signal(
            AgentTaskWorkflow.submit_decision,
            {
                "request_id": request.request_id,
                "version": request.version,
                "decision": "approve",
                "principal": principal,
            },
        )
    status = await env.wait_status(handle, lambda s: s.ignored_count == 6)
    assert all(len(i.principal or "") <= 256 for i in status.ignored)
    assert any("at most 256 characters" in i.reason for i in status.ignored)
    assert any("may not decide" in i.reason for i in status.ignored)
    # The update refuses the same before history, naming the field.
    try:
        await decide(
            handle,
            request_id=request.request_id,
            version=request.version,
            decision="edit",
            principal="finance-lead",
            edited_args={"value": "v" * (MAX_EDITED_ARGS_BYTES + 1)},
        )
        raise AssertionError("an oversized edit was accepted")
    except Exception as err:  # the update's validator refused it
        assert "edited_args" in str(err.__cause__ or err)
    await env.approve(handle)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert env.business().count() == 1
    await assert_no_workflow_task_failed(handle)


async def test_an_edit_at_the_maximum_size_is_written(env: TaskEnv) -> None:
    """An edit whose arguments are just under the limit goes through to the business write."""
    handle = await env.start(recorder("edit-1"))
    [request] = (await env.awaiting_approval(handle)).pending
    value = "e" * (MAX_EDITED_ARGS_BYTES - 100)
    outcome = await decide(
        handle,
        request_id=request.request_id,
        version=request.version,
        decision="edit",
        principal="finance-lead",
        edited_args={"value": value},
    )
    assert outcome.accepted is True, outcome
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert env.business().count() == 1
    await assert_no_workflow_task_failed(handle)
    await assert_replays(env.client, handle.id, keep=False)  # 64 KiB in many places: not committed


async def test_follow_ups_past_the_per_task_cap_are_refused_at_arrival_and_the_task_completes(
    env: TaskEnv,
) -> None:
    """25 follow-ups of 99,000 characters while the task waits: those that fit under the cap wait
    for the next turn, the rest are refused with the reason, and the task goes on to complete."""
    handle = await env.start(recorder("follow-1"))
    await env.awaiting_approval(handle)
    for n in range(25):
        await handle.signal(AgentTaskWorkflow.add_input, {"text": f"{n}:" + "f" * 98_998, "principal": "ana"})
    await env.approve(handle)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    await assert_no_workflow_task_failed(handle)
    events = list(JsonlEventSink(env.config.events_dir).read(handle.id))
    fit = MAX_PENDING_FOLLOW_UP_BYTES // 99_000
    assert sum(e.type.value == "input.added" for e in events) == fit
    refused = [e for e in events if e.type.value == "input.ignored"]
    assert len(refused) == 25 - fit
    assert all(f"{MAX_PENDING_FOLLOW_UP_BYTES:,}" in e.data["reason"] for e in refused)


async def test_three_commands_printing_near_the_output_limit_complete_with_a_result_that_fits(
    env: TaskEnv,
) -> None:
    """With the inline output limit at its maximum (1 MiB), three commands printing 900 KB each: the
    task completes, its result fits a Temporal payload, and the full output is kept by digest."""
    spec = {
        "agent": "loud",
        "prompt": "print 900000 bytes 3 times",
        "sandbox": {"output_limit_bytes": 1_048_576},
    }
    handle = await env.start(spec)
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert len(result.model_dump_json()) < MAX_PAYLOAD_BYTES
    await assert_no_workflow_task_failed(handle)
    assert result.final_output == "printed [(0, 262144), (0, 262144), (0, 262144)]"
    # All three records are kept: inline or in the archived parts, each with its full stdout's digest.
    assert len(result.evidence.commands) + len(result.evidence.archived) >= 1
    store = env.store()
    for record in result.evidence.commands:
        assert len(store.get(record.stdout_artifact.digest)) == 900_000


async def test_a_model_answer_past_the_limit_is_kept_whole_as_an_artifact(env: TaskEnv) -> None:
    """A 3,000,000-character final answer: the task completes, the result carries its head, and the
    whole answer is an artifact of the evidence."""
    handle = await env.start({"agent": "loud", "prompt": "answer 3000000 chars"})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output is not None and len(result.final_output) < 300_000
    [whole] = [a for a in result.evidence.artifacts if a.name == "final-output.txt"]
    assert whole.size == 3_000_000 and whole.digest in result.final_output
    assert env.store().get(whole.digest) == b"y" * 3_000_000
    await assert_no_workflow_task_failed(handle)


async def test_tool_arguments_past_the_limit_go_back_to_the_model_as_an_error(env: TaskEnv) -> None:
    """A write proposed with 300 KB of arguments is not planned: the model is told why, nothing is
    written, and the task completes."""
    handle = await env.start(recorder("v" * 300_000))
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output is not None and "propose fewer or smaller calls" in result.final_output
    assert env.business().count() == 0
    await assert_no_workflow_task_failed(handle)


async def test_a_prompt_at_the_limit_runs_and_one_past_it_is_refused_naming_the_limit(env: TaskEnv) -> None:
    """A spec just under the limit completes; one over it fails at once with the limit named."""
    near = MAX_SPEC_BYTES - 2_000
    handle = await env.start({"agent": "shell", "prompt": "run: echo big\n\n" + "p" * near})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    await assert_no_workflow_task_failed(handle)

    handle = await env.start({"agent": "shell", "prompt": "p" * (MAX_SPEC_BYTES + 1)})
    try:
        await asyncio.wait_for(handle.result(), 30)
        raise AssertionError("an oversized spec ran")
    except WorkflowFailureError as err:
        assert f"{MAX_SPEC_BYTES:,}" in str(err.cause)
    await assert_no_workflow_task_failed(handle)
