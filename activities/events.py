"""Delivering task events to a sink: the ``events.publish`` activity.

The workflow holds every event (with a stable ``<task id>/<run chain>/<seq>`` id) in its state until
it is delivered, and delivers in order; delivery runs as an activity, so replay never repeats it and a
worker crash only delays it. A retried delivery may carry events the sink already has: sinks drop
every event whose id they already hold, which makes the stream exactly-once, in order.

Since patch ``local-delivery`` the workflow delivers in the workflow task that recorded the events, as
the local activity ``events.publish_here`` (no activity of its own, no workflow task for its result).
A workflow task can fail after its local delivery ran (a worker lost, a signal that made the server
refuse its completion), and its retry, which sees more history, may number its events otherwise. So a
local delivery carries its ``basis`` (the run and history length of the workflow task that made it),
and a sink that can replace (``publish_from``) keeps, for each ``seq``, the copy of the highest basis:
it replaces what it holds from the delivery's first ``seq`` on when that came with a lower basis, and
drops a delivery older than what it holds (a lost attempt's, arriving late). The sink then ends with
exactly what the committed history recorded; a reader that looked in between may have seen the lost
attempt's events, as on the live stream. A sink without ``publish_from`` (a custom one) answers
``delivered`` 0 to the local delivery, and the workflow sends the events as ``events.publish``.

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

from agent_worker.activities.errors import activity_boundary
from agent_worker.schemas.events import Event, PublishEventsInput, PublishEventsResult
from agent_worker.security.redact import redact_value
from temporalio import activity


class EventSink(Protocol):
    """Where events go. ``publish`` must ignore events it already holds (by ``event_id``).

    A sink may also offer ``publish_from(task_id, events, basis) -> (new, replaced)`` with the
    contract of ``plan_replace``; the built-in ones do, and only those take local deliveries."""

    def publish(self, task_id: str, events: list[Event]) -> int:
        """Store the events it does not have yet; how many were new."""
        ...


def plan_replace(stored: dict[int, int | None], basis: int) -> tuple[bool, set[int]]:
    """What a sink does with a delivery of ``basis`` given the bases of the events it holds of that run
    chain from the delivery's first ``seq`` on (``seq -> basis``; None for a committed delivery's).

    Returns (take, drop): ``take`` False when the sink holds one of a higher basis or a committed one
    (the delivery is from an attempt that lost); ``drop`` the stored seqs to delete (a lower basis).
    The events it then keeps of the same basis are the same attempt's (a local activity retried), so
    the delivery's copies of them are skipped."""
    if any(b is None or b > basis for b in stored.values()):
        return False, set()
    return True, {seq for seq, b in stored.items() if b is not None and b < basis}


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

    def publish_from(self, task_id: str, events: list[Event], basis: int) -> tuple[int, int]:
        """Store a local delivery (``plan_replace``): (new, replaced). Lines carry their ``basis``."""
        if not events:
            return 0, 0
        chain, first = events[0].run_chain, events[0].seq
        path = self.path(task_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("r+b" if path.exists() else "w+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            _cut_torn_line(f)
            start, lines = _lines_from(f, chain, first)
            ours = [(line, json.loads(line)) for line in lines]
            stored = {int(d["seq"]): d.get("basis") for _, d in ours if d.get("run_chain") == chain}
            take, drop = plan_replace(stored, basis)
            if not take:
                return 0, 0
            held = set(stored) - drop
            new = [e for e in events if e.seq not in held]
            if drop:  # rewrite the tail without the lost attempt's events
                f.truncate(start)
                f.seek(start)
                for line, d in ours:
                    if not (d.get("run_chain") == chain and int(d["seq"]) in drop):
                        f.write(line + b"\n")
            f.seek(0, os.SEEK_END)
            for event in new:  # the event's JSON with its basis as one more key
                f.write(event.model_dump_json(by_alias=True)[:-1].encode() + b',"basis":%d}\n' % basis)
            f.flush()
            os.fsync(f.fileno())
        return len(new), len(drop)

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
    start, tail = _cut_torn_line(f)
    if not tail:
        return 0
    size = start + len(tail)
    found = _last_seq_in(tail.splitlines()[1 if start else 0 :], chain)  # a tail's first line may be cut
    if found is None and start:
        f.seek(0)
        found = _last_seq_in(f.read(size).splitlines(), chain)
    return found or 0


def _cut_torn_line(f: BinaryIO) -> tuple[int, bytes]:
    """Cut off a torn last line, left by a crash in the middle of a write (the caller holds the
    lock); return the file's last 64 KiB, whole lines only, and where they start."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    start = max(0, size - 65536)
    f.seek(start)
    tail = f.read()
    if tail and not tail.endswith(b"\n"):
        cut = tail.rfind(b"\n") + 1  # 0 when the whole tail is one torn line
        f.truncate(start + cut)
        tail = tail[:cut]
    return start, tail


def _lines_from(f: BinaryIO, chain: str | None, first: int) -> tuple[int, list[bytes]]:
    """The byte offset just after the file's last line of run chain ``chain`` with a ``seq`` below
    ``first`` (0: none), and the lines after it. Only the tail is read when it holds that line."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    for start in dict.fromkeys((max(0, size - 65536), 0)):
        f.seek(start)
        lines = f.read(size - start).split(b"\n")
        ends, end = [], start
        for line in lines:
            end += len(line) + 1
            ends.append(end)
        for i in range(len(lines) - 1, 0 if start else -1, -1):  # a tail's first line may be cut
            if lines[i].strip():
                stored = json.loads(lines[i])
                if stored.get("run_chain") == chain and int(stored["seq"]) < first:
                    return ends[i], [x for x in lines[i + 1 :] if x.strip()]
    return 0, [x for x in lines if x.strip()]


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
        return await self._deliver(input)

    @activity.defn(name="events.publish_here")
    @activity_boundary
    async def publish_here(self, input: PublishEventsInput) -> PublishEventsResult:
        """``events.publish`` as a local activity, in the workflow task that recorded the events
        (patch ``local-delivery``): the sink replaces what a lost attempt of it delivered (module
        docstring). A sink that cannot replace answers ``delivered`` 0: the workflow then sends the
        events as ``events.publish``."""
        if input.basis is None or not hasattr(self.sink, "publish_from"):
            return PublishEventsResult(delivered=0, new=0)
        return await self._deliver(input)

    async def _deliver(self, input: PublishEventsInput) -> PublishEventsResult:
        events = [e.model_copy(update={"data": redact_value(e.data)}) for e in input.unpacked()]
        publish_from = getattr(self.sink, "publish_from", None)
        if input.basis is None or publish_from is None:
            new = await asyncio.to_thread(self.sink.publish, input.task_id, events)
            return PublishEventsResult(delivered=len(events), new=new)
        new, replaced = await asyncio.to_thread(publish_from, input.task_id, events, input.basis)
        return PublishEventsResult(delivered=len(events), new=new, replaced=replaced)
