"""A task's live stream as Server-Sent Events (``GET /v1/tasks/{id}/stream``).

Each entry (``schemas.streams.StreamEntry``) is one frame: ``event`` = its kind, ``id`` = its
offset, ``data`` = the entry as JSON. ``Last-Event-ID`` resumes after that offset, with no gap and
no repeat; entries the stream no longer keeps (past its retention) are announced by a ``gap`` frame
naming them. The response ends, with an ``end`` frame, once the task has closed and every entry was
sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from activities.stores.streams import StreamBackend

# How long one read waits for a new entry; how often an idle stream sends a comment (so proxies
# keep the connection).
BLOCK_MS = 1_000
KEEPALIVE_SECONDS = 15.0
BATCH = 500


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


__all__ = ["follow_stream", "follow_task", "frame", "resume_after"]
