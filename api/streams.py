"""A task's live stream (``GET /v1/tasks/{id}/stream``) and its events (``/events``) as Server-Sent
Events.

Each entry (``schemas.streams.StreamEntry``) is one frame: ``event`` = its kind, ``id`` = its
offset, ``data`` = the entry as JSON. ``Last-Event-ID`` resumes after that offset, with no gap and
no repeat; entries the stream no longer keeps (past its retention) are announced by a ``gap`` frame
naming them. The response ends, with an ``end`` frame, once the task has closed and every entry was
sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agent_worker.activities.stores.streams import StreamBackend
from agent_worker.schemas.events import Event
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from agent_worker.client import AgentWorkerClient, AgentWorkerError, TaskNotFound

# How long one read waits for a new entry; how often an idle stream sends a comment (so proxies
# keep the connection).
BLOCK_MS = 1_000
KEEPALIVE_SECONDS = 15.0
BATCH = 500
# How often the event stream asks a running task for its newest events.
POLL_SECONDS = 0.5
# How long an event stream waits, after the task's phase turned terminal, for the task to close.
CLOSE_WAIT_SECONDS = 30


def frame(kind: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    """One SSE frame."""
    lines = [f"event: {kind}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"data: {json.dumps(data, separators=(',', ':'))}")
    return ("\n".join(lines) + "\n\n").encode()


async def follow_stream(
    backend: StreamBackend,
    task_id: str,
    run_chain: str | None,
    after: int,
    closed: Callable[[], Awaitable[bool]],
) -> AsyncIterator[bytes]:
    """SSE frames of the stream's entries after offset ``after``, until ``closed()`` says the task
    has closed and nothing is left."""
    seen = after
    idle_since = time.monotonic()
    finishing = False
    while True:
        wait = 0 if finishing else BLOCK_MS
        entries = await asyncio.to_thread(backend.read, task_id, run_chain, seen, BATCH, wait)
        if entries and entries[0].offset > seen + 1:
            yield frame("gap", {"missed_from": seen + 1, "missed_to": entries[0].offset - 1})
        for entry in entries:
            seen = entry.offset
            yield frame(entry.kind, entry.model_dump(mode="json"), entry.offset)
        if entries:
            idle_since = time.monotonic()
            continue
        if finishing:
            yield frame("end", {"offset": seen})
            return
        # Nothing new: once the task has closed, one more read drains what was written meanwhile.
        finishing = await closed()
        if not finishing and time.monotonic() - idle_since > KEEPALIVE_SECONDS:
            idle_since = time.monotonic()
            yield b": keepalive\n\n"


def resume_after(last_event_id: str | None) -> int:
    """The offset a ``Last-Event-ID`` header resumes after (0: from the start)."""
    return int(last_event_id) if last_event_id and last_event_id.isdigit() else 0


async def follow_task(
    backend: StreamBackend, handle: WorkflowHandle[Any, Any], after: int
) -> AsyncIterator[bytes]:
    """``follow_stream`` of the task's current run chain, until its workflow has closed. The chain is
    read here, before the response starts, so a task that cannot be described fails the request."""
    chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id or None

    async def closed() -> bool:
        return (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING

    return follow_stream(backend, handle.id, chain, after, closed)


async def follow_events(
    tasks: AgentWorkerClient, task_id: str, after: int, read_stored: Callable[[], list[Event]] | None
) -> AsyncIterator[bytes]:
    """SSE frames of the task's events after sequence number ``after``, then ``end``. The phase turns
    terminal before the task has delivered its last events and closed; ``end`` comes once it has
    closed (or ``CLOSE_WAIT_SECONDS`` later), after the events it recorded meanwhile, so that a reader
    who reads the task on ``end`` finds its result."""
    seen = after
    closed = False
    while True:
        try:
            status = await tasks.status(task_id, wait_seconds=10)
        except (TaskNotFound, AgentWorkerError) as err:
            yield frame("error", {"detail": str(err)})
            return
        known = {e.seq: e for e in status.last_events}
        if read_stored is not None and (not known or min(known) > seen + 1):
            known.update({e.seq: e for e in await asyncio.to_thread(read_stored) if e.seq > seen})
        fresh = sorted((e for e in known.values() if e.seq > seen), key=lambda e: e.seq)
        if fresh and fresh[0].seq > seen + 1:
            yield frame("gap", {"missed_from": seen + 1, "missed_to": fresh[0].seq - 1})
        for event in fresh:
            seen = event.seq
            yield frame(event.type.value, event.model_dump(mode="json", by_alias=True), event.seq)
        if status.phase.terminal and not closed:
            closed = True
            with contextlib.suppress(AgentWorkerError, TimeoutError):
                await asyncio.wait_for(tasks.result(task_id), CLOSE_WAIT_SECONDS)
            continue  # once more: the events it recorded as it closed
        if status.phase.terminal:
            yield frame("end", {"phase": status.phase.value, "reason": status.reason})
            return
        await asyncio.sleep(POLL_SECONDS)


__all__ = ["follow_events", "follow_stream", "follow_task", "frame", "resume_after"]
