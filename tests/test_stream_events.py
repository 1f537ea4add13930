"""Lifecycle events in the live stream: phases, approvals, commands and writes reach a task's
stream as the workflow emits them (``activities.stores.live_events``), each once and in order,
beside the turns' own entries; a command's output is there as it finishes; a waiting task's events
are in the stream while it waits."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from agent_worker.activities.events import JsonlEventSink
from agent_worker.activities.stores.live_events import MAX_QUEUED, LiveEventTap
from agent_worker.activities.stores.state import build_stream_backend
from agent_worker.activities.stores.streams import SqliteStreamBackend
from agent_worker.schemas.events import Event, EventType
from agent_worker.schemas.streams import StreamEntry
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.client import Client

from tests.helpers.support import DevServer, TaskEnv, make_config, running_worker


async def test_a_task_s_lifecycle_events_reach_its_stream_once_in_order(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """While the write waits for approval, the stream already holds the command's event and the
    approval request; at the end it holds every event the sink holds, in the same order, none
    twice, after the turns' step entries they follow."""
    config = make_config(tmp_path / "data")
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    backend = build_stream_backend(config)
    assert backend is not None
    spec = {
        "agent": "recorder",
        "prompt": "first run: echo hi; record: 42",
        "policy": {"default_approvers": ["finance-lead"]},
    }
    async with running_worker(client, config):
        handle = await env.start(spec)
        await env.awaiting_approval(handle)
        chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
        # The task delivers its events as it starts to wait (the phase shows a moment before).
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            waiting = [e.data["type"] for e in backend.read(handle.id, chain, 0, 1000) if e.kind == "event"]
            if EventType.APPROVAL_REQUESTED.value in waiting or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        assert EventType.SANDBOX_EXEC.value in waiting and EventType.APPROVAL_REQUESTED.value in waiting
        [output] = [e.data for e in backend.read(handle.id, chain, 0, 1000) if e.kind == "tool_result"]
        assert (output["name"], output["exit_code"], output["output"]) == ("run_shell", 0, "hi\n")
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED

    entries = backend.read(handle.id, chain, 0, 5000)
    streamed = [e.data for e in entries if e.kind == "event"]
    sunk = [e.model_dump(mode="json") for e in JsonlEventSink(config.events_dir).read_chain(handle.id, chain)]
    assert [e["event_id"] for e in streamed] == [e["event_id"] for e in sunk], "each event once, in order"
    assert streamed[-1]["type"] == EventType.TASK_FINISHED.value and streamed[-1]["phase"] == "completed"
    assert {EventType.WRITE_CONFIRMED.value, EventType.APPROVAL_DECIDED.value} <= {
        e["type"] for e in streamed
    }
    # The first turn's steps come before the events delivered after it.
    first_turn_end = next(
        e.offset for e in entries if e.kind == "step" and e.data.get("step") == "turn.finished"
    )
    decided = next(e.offset for e in entries if e.kind == "event" and e.data["type"] == "approval.decided")
    assert first_turn_end < decided


def _event(task_id: str, seq: int, chain: str = "chain-1") -> Event:
    return Event(
        event_id=f"{task_id}/{chain}/{seq}",
        task_id=task_id,
        seq=seq,
        type=EventType.PHASE_CHANGED,
        at=datetime.now(UTC),
        phase="running",
        data={"note": "token sk-live-abcdefghijklmnopqrstuvwx"},
        run_chain=chain,
    )


def test_the_tap_streams_each_event_once_redacted_and_survives_a_store_that_is_down(tmp_path: Path) -> None:
    """An event offered again (a failed workflow task's retry) is streamed once; data is redacted as
    the sink's is; a store that raises loses the entries of that write, not the tap."""
    backend = SqliteStreamBackend(tmp_path / "streams.db")
    tap = LiveEventTap(backend)
    for seq in (1, 2, 2, 1, 3):
        tap.offer(_event("t-1", seq))
    tap.close()
    entries = backend.read("t-1", "chain-1", 0, 100)
    assert [e.data["seq"] for e in entries] == [1, 2, 3]
    assert all("sk-live" not in str(e.data) for e in entries)

    class Down:
        def append(self, *args: object) -> list[int]:
            raise ConnectionError("stream store down")

        def append_many(self, *args: object) -> dict[tuple[str, str | None], list[int]]:
            raise ConnectionError("stream store down")

    broken = LiveEventTap(Down())  # type: ignore[arg-type]
    broken.offer(_event("t-2", 1))
    broken.close()
    assert not broken._thread.is_alive()  # it ended on close, not on the error


def test_a_flood_past_the_tap_s_bound_is_counted_and_dropped_and_what_it_held_is_written() -> None:
    """The tap holds at most ``MAX_QUEUED`` entries while its store is stuck; a flood past that is
    dropped and counted (never waiting in the workflow thread), and once the store answers, what the
    tap held is written in order, each once."""
    written: list[int] = []
    stuck = threading.Event()
    release = threading.Event()
    released_in_time: list[bool] = []

    class Stuck:
        def append(self, task_id: str, chain: str | None, entries: list[StreamEntry]) -> list[int]:
            stuck.set()
            # Released by the test once its offers return: an offer that waited for room would
            # hold the test up until this times out.
            released_in_time.append(release.wait(60))
            written.extend(e.data["seq"] for e in entries)
            return list(range(len(entries)))

    tap = LiveEventTap(Stuck())  # type: ignore[arg-type]
    tap.offer(_event("t-flood", 1))
    assert stuck.wait(10), "the writer took the first event"
    flood = MAX_QUEUED + 2_000
    events = [_event("t-flood", seq) for seq in range(2, flood + 2)]
    started = time.perf_counter()
    for event in events:
        tap.offer(event)
    offering = time.perf_counter() - started
    assert tap.dropped == 2_000, f"held {MAX_QUEUED}, dropped the rest: {tap.dropped}"
    release.set()
    tap.close(timeout=60)
    assert not tap._thread.is_alive()
    assert all(released_in_time), "an offer waited for the stuck store"
    assert written == list(range(1, MAX_QUEUED + 2)), "the first event, then all the tap held, in order"
    print(f"{flood} offers in {offering:.2f} s")
