"""Delivering task events to a sink: the ``events.publish`` activity.

The workflow holds every event (with a stable ``<task id>/<run chain>/<seq>`` id) in its state until
it is delivered, and delivers in order; delivery runs as an activity, so replay never repeats it and a
worker crash only delays it. A retried delivery may carry events the sink already has: sinks drop
every event whose id they already hold, which makes the stream exactly-once, in order.

The default sink needs no service: one JSON-lines file per task under ``<data dir>/events/``. Plug in
another with ``AGENT_WORKER_EVENT_SINK=module:factory`` (the factory gets the worker config); a fleet
uses the PostgreSQL sink (``state_backend=postgres``: ``activities.stores.postgres``).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from temporalio import activity

from activities.errors import activity_boundary
from schemas.events import Event, PublishEventsInput, PublishEventsResult
from security.redact import redact_value


class EventSink(Protocol):
    """Where events go. ``publish`` must ignore events it already holds (by ``event_id``)."""

    def publish(self, task_id: str, events: list[Event]) -> int:
        """Store the events it does not have yet; how many were new."""
        ...


class JsonlEventSink:
    """One append-only JSON-lines file per task id; events arrive in order, so the last stored
    sequence number of the events' run chain is all the de-duplication needs. A reused task id is a
    new run chain, whose sequence starts again at 1 after the earlier run's events in the same file
    (``read_chain`` picks one run's)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, task_id: str) -> Path:
        """The task's file (named by a hash: task ids may contain '/')."""
        return self.root / f"{hashlib.sha256(task_id.encode()).hexdigest()[:32]}.jsonl"

    def publish(self, task_id: str, events: list[Event]) -> int:
        path = self.path(task_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("r+b" if path.exists() else "w+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # a zombie attempt and its retry never interleave
            chains = {e.run_chain for e in events}
            last = {chain: _last_seq(f, chain) for chain in chains}
            new = [e for e in events if e.seq > last[e.run_chain]]
            f.seek(0, os.SEEK_END)
            for event in new:
                f.write(event.model_dump_json(by_alias=True).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        return len(new)

    def read(self, task_id: str) -> Iterator[Event]:
        """The task id's stored events, in order (of every run that used the id)."""
        path = self.path(task_id)
        if not path.exists():
            return
        with path.open() as f:
            for line in f:
                if line.strip():
                    yield Event.model_validate_json(line)

    def read_chain(self, task_id: str, run_chain: str | None) -> Iterator[Event]:
        """The stored events of one run chain of the task id (None: a task started before run
        chains), in order."""
        return (e for e in self.read(task_id) if e.run_chain == run_chain)


def _last_seq(f: BinaryIO, chain: str | None) -> int:
    """The ``seq`` of the file's last complete line of run chain ``chain`` (0 when it has none). A
    torn last line, left by a crash in the middle of a write, is cut off first (the caller holds the
    lock). Only the tail is read, unless the chain is not in it (a new run of a reused task id)."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    if size == 0:
        return 0
    start = max(0, size - 65536)
    f.seek(start)
    tail = f.read()
    if not tail.endswith(b"\n"):
        cut = tail.rfind(b"\n") + 1  # 0 when the whole tail is one torn line
        f.truncate(start + cut)
        tail = tail[:cut]
        size = start + cut
    found = _last_seq_in(tail.splitlines()[1 if start else 0 :], chain)  # a tail's first line may be cut
    if found is None and start:
        f.seek(0)
        found = _last_seq_in(f.read(size).splitlines(), chain)
    return found or 0


def _last_seq_in(lines: list[bytes], chain: str | None) -> int | None:
    for line in reversed(lines):
        if line.strip():
            stored = json.loads(line)
            if stored.get("run_chain") == chain:
                return int(stored["seq"])
    return None


class EventActivities:
    """``events.publish`` over one sink."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    @activity.defn(name="events.publish")
    @activity_boundary
    async def publish(self, input: PublishEventsInput) -> PublishEventsResult:
        """Deliver a task's events (in order); those the sink already holds are dropped. Their data
        is redacted (``security.redact``) before any sink sees it."""
        events = [e.model_copy(update={"data": redact_value(e.data)}) for e in input.unpacked()]
        new = await asyncio.to_thread(self.sink.publish, input.task_id, events)
        return PublishEventsResult(delivered=len(events), new=new)
