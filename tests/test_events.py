"""Task events reach the sink exactly once, in order, whatever happens to the workers, packed or
whole; the CLI shows the timeline; the event schema shipped for other languages matches the models."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from agent_worker.activities.events import EventActivities, JsonlEventSink
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.events import (
    Event,
    EventType,
    PublishEventsInput,
    PublishEventsResult,
    event_id_for,
)
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from pydantic import BaseModel
from temporalio import activity

import agent_worker.plugin
import agent_worker.worker
from tests.helpers.support import TaskEnv, assert_replays, example_spec, running_worker, spawn_worker


async def test_event_stream_is_exactly_once_in_order_across_a_crash_and_a_replay(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """Worker killed while the task waits; the next worker caches nothing, so it replays the whole
    history on every step; the sink still holds every event once, in order, the same as the task's
    own record."""
    env = config_env
    first = spawn_worker(env, tmp_path / "worker-1.log")
    try:
        handle = await env.start(example_spec())
        [request] = (await env.awaiting_approval(handle)).pending
        sink = JsonlEventSink(env.config.events_dir)
        # Delivered before the wait for a human began (in a short run: the task continued as new).
        assert [e.type.value for e in sink.read(handle.id)][-2:] == ["phase.changed", "task.continued_as_new"]
        os.kill(first.pid, signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
    finally:
        if first.poll() is None:
            first.kill()
    second = spawn_worker(env, tmp_path / "worker-2.log", AGENT_WORKER_MAX_CACHED_WORKFLOWS="0")
    try:
        await handle.signal(
            AgentTaskWorkflow.submit_decision,
            {
                "request_id": request.request_id,
                "version": request.version,
                "decision": "approve",
                "principal": "finance-lead",
            },
        )
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
        status = await handle.query(AgentTaskWorkflow.status)
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
    assert result.phase is TaskPhase.COMPLETED
    stored = list(JsonlEventSink(env.config.events_dir).read(handle.id))
    seqs = [e.seq for e in stored]
    print(f"\nsink: {len(stored)} events, seq 1..{seqs[-1]}, unique ids {len({e.event_id for e in stored})}")
    assert seqs == list(range(1, len(stored) + 1))  # every event once, in order
    assert len({e.event_id for e in stored}) == len(stored)
    assert stored[0].type.value == "task.started" and stored[-1].type.value == "task.finished"
    assert stored[-1].seq == status.last_events[-1].seq  # nothing the task recorded is missing
    tail = {e.seq: e for e in status.last_events}
    assert all(e == tail[e.seq] for e in stored if e.seq in tail)


async def test_events_command_prints_the_timeline(env: TaskEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """`agent-worker events ID` shows the phases in order; `--json` gives one event per line."""
    os.environ["AGENT_WORKER_DATA_DIR"] = str(env.config.data_dir)
    try:
        handle = await env.start({"agent": "shell", "prompt": "run: echo hi"})
        await asyncio.wait_for(handle.result(), 60)
        assert await asyncio.to_thread(cli_main, ["--address", env.address, "events", handle.id]) == 0
        text = capsys.readouterr().out
        assert (
            await asyncio.to_thread(cli_main, ["--address", env.address, "events", handle.id, "--json"]) == 0
        )
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    finally:
        del os.environ["AGENT_WORKER_DATA_DIR"]
    assert text.index("task.started") < text.index("sandbox.exec") < text.index("task.finished")
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert lines[0]["schema"] == "agent-worker.event/v1"


def test_the_committed_json_schemas_match_the_models() -> None:
    """`schemas/jsonschema/` is what the models generate today (run
    `python -m agent_worker.schemas.export`)."""
    from agent_worker.schemas.export import OUT, render

    expected = render()
    assert sorted(p.name for p in OUT.glob("*.json")) == sorted(expected)
    for name, text in expected.items():
        assert (OUT / name).read_text() == text, f"{name} is stale: run python -m agent_worker.schemas.export"
    event = json.loads(expected["event.v1.schema.json"])
    assert event["properties"]["schema"]["const"] == "agent-worker.event/v1"
    assert set(event["required"]) >= {"event_id", "task_id", "seq", "type", "at", "phase"}


class _InputBeforePacking(BaseModel):
    """``events.publish``'s input as a worker from before patch ``packed-events`` reads it."""

    task_id: str
    events: list[Event]


_BEFORE_PACKING_CALLS: list[int] = []
_HERE_CALLS: list[int] = []


class _EventsBeforePacking(EventActivities):
    @activity.defn(name="events.publish")
    async def publish(self, input: _InputBeforePacking) -> PublishEventsResult:  # type: ignore[override]
        """``events.publish`` as it was before packing: only ``events``, whole."""
        _BEFORE_PACKING_CALLS.append(len(input.events))
        new = await asyncio.to_thread(self.sink.publish, input.task_id, list(input.events))
        return PublishEventsResult(delivered=len(input.events), new=new)

    @activity.defn(name="events.publish_here")
    async def publish_here(self, input: PublishEventsInput) -> PublishEventsResult:
        """A sink that cannot replace (a custom one without ``publish_from``) answers the local
        delivery ``delivered`` 0."""
        _HERE_CALLS.append(len(input.packed) + len(input.events))
        return PublishEventsResult(delivered=0, new=0)


def _event(seq: int, chain: str | None = "chain-1", task_id: str = "t-1") -> Event:
    return Event(
        event_id=event_id_for(task_id, chain, seq),
        task_id=task_id,
        run_chain=chain,
        seq=seq,
        type=EventType.PHASE_CHANGED,
        at="2026-12-03T10:00:00Z",
        phase="running",
        data={"previous": "received", "phase": "running", "n": seq},
    )


def test_a_packed_delivery_unpacks_to_the_same_events_and_is_a_third_smaller() -> None:
    """Packing drops only what the delivery's events share; an event whose envelope differs (another
    run chain, an id not made of the delivery's) goes whole, and one out of order makes the whole
    delivery go whole."""
    events = [_event(seq) for seq in range(1, 26)]
    packed = PublishEventsInput.pack("t-1", events)
    assert packed.events == [] and len(packed.packed) == 25 and packed.unpacked() == events
    whole = PublishEventsInput(task_id="t-1", events=events)
    assert len(packed.model_dump_json()) < 0.7 * len(whole.model_dump_json())
    odd = _event(1).model_copy(update={"event_id": "t-1/other/1"})
    mixed = PublishEventsInput.pack("t-1", [odd, *events[1:]])
    assert [e.seq for e in mixed.events] == [1] and mixed.unpacked() == [odd, *events[1:]]
    late = _event(25, chain="chain-0")
    out_of_order = PublishEventsInput.pack("t-1", [*events[:24], late])
    assert out_of_order.packed == [] and out_of_order.unpacked() == [*events[:24], late]


async def test_a_worker_from_before_packed_events_gets_each_part_again_whole(
    config_env: TaskEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sink that cannot replace answers the local delivery ``delivered`` 0, and the part goes as
    ``events.publish``; one from before patch ``packed-events`` reads only ``events``: given a packed
    part it stores nothing and answers ``delivered`` 0, and the task sends the part again whole. The
    sink still gets every event once, in order."""
    calls = _BEFORE_PACKING_CALLS
    calls.clear()
    _HERE_CALLS.clear()
    monkeypatch.setattr(agent_worker.plugin, "EventActivities", _EventsBeforePacking)
    env = config_env
    async with running_worker(env.client, env.config):
        handle = await env.start(example_spec())
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    # Two deliveries (before the wait, at the end), each tried here, then packed, then whole.
    assert len(_HERE_CALLS) == 2 and all(_HERE_CALLS), _HERE_CALLS
    assert len(calls) == 4 and all(whole == 0 for whole in calls[::2]), calls
    assert all(whole > 0 for whole in calls[1::2]), calls
    stored = list(JsonlEventSink(env.config.events_dir).read(handle.id))
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert stored[-1].type.value == "task.finished"


async def test_a_worker_killed_after_its_local_delivery_leaves_the_sink_as_the_history_recorded(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """The worker delivers the approval request in its workflow task (patch ``local-delivery``) and
    dies before that task commits; a decision the task cannot know arrives meanwhile, so the retry on
    the next worker records an ignored decision first and numbers every later event otherwise. The
    sink ends with exactly what the committed history recorded: every seq once, in order, each event
    the task's own record of it (the lost attempt's copies replaced), one approval request."""
    env = config_env
    killing = {"AGENT_WORKER_EVENT_SINK": "tests.helpers.killing_sink:factory"}
    first = spawn_worker(env, tmp_path / "worker-1.log", **killing)
    # A short workflow-task timeout: the dead worker's task is retried after it, not after 60 s.
    handle = await env.client.start_workflow(
        AgentTaskWorkflow.run,
        example_spec(),
        id=f"t-{uuid.uuid4().hex[:10]}",
        task_queue=env.task_queue,
        result_type=TaskResult,
        task_timeout=timedelta(seconds=5),
    )
    try:
        await asyncio.wait_for(asyncio.to_thread(first.wait), 60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == -signal.SIGKILL
    sink = JsonlEventSink(env.config.events_dir)
    lost = list(sink.read(handle.id))
    [lost_request] = [e for e in lost if e.type is EventType.APPROVAL_REQUESTED]  # by the lost attempt
    unknown = {"request_id": "no-such-request", "version": "0" * 64, "decision": "approve"}
    await handle.signal(AgentTaskWorkflow.submit_decision, {**unknown, "principal": "finance-lead"})
    second = spawn_worker(env, tmp_path / "worker-2.log")
    try:
        waiting = await env.awaiting_approval(handle)  # the task's own record, up to the wait
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
        status = await handle.query(AgentTaskWorkflow.status)
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    stored = list(sink.read(handle.id))
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    recorded = {e.seq: e for e in [*waiting.last_events, *status.last_events]}
    assert stored[-1].seq == status.last_events[-1].seq and set(recorded) == {e.seq for e in stored}
    assert all(e == recorded[e.seq] for e in stored)
    types = [e.type for e in stored]
    assert types.count(EventType.APPROVAL_REQUESTED) == 1 and EventType.APPROVAL_IGNORED in types
    # The retry numbered the request otherwise than the lost attempt did: the sink replaced it.
    moved = next(e.seq for e in stored if e.type is EventType.APPROVAL_REQUESTED)
    assert moved != lost_request.seq and stored[lost_request.seq] != lost_request, (moved, lost_request)


async def test_an_approved_write_records_its_approval_check_before_its_outcome(env: TaskEnv) -> None:
    """In a real approved write, ``authz.checked`` (the write's own re-check of the approval, made in
    ``business.write`` before it writes) comes after the ``write.attempted`` that carried it and before
    ``write.confirmed``, in the sink as in the task's status; the history replays."""
    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    types = [e.type.value for e in JsonlEventSink(env.config.events_dir).read(handle.id)]
    write_events = [t for t in types if t.startswith(("write.", "authz."))]
    assert write_events == ["write.attempted", "authz.checked", "write.confirmed"]
    assert types.index("approval.decided") < types.index("write.attempted")
    await assert_replays(env.client, handle.id)
