"""Lifecycle events into the live stream the moment the workflow emits them, outside history.

The event sink gets a task's events in deliveries (``events.publish``: before each wait for a human,
every 25 events, at the end), which is right for the audit record and cheap in history, but a reader
following the task would see a phase change or an approval request up to a turn late. So the
workflow also *offers* each event, as it emits it, to a tap of the worker process that runs it:
like a log line or a metric, a side channel that changes nothing the workflow decides, skipped on
replay (``workflow.unsafe.is_replaying``). A finished sandbox command's output preview goes the
same way, as a ``tool_result`` entry. The tap only enqueues (it never blocks the workflow
thread); a thread of the worker writes the queue to the stream backend as ``event`` entries, their
data redacted as the sink's is.

An activation whose workflow task then fails is run again and emits its events again: the tap skips
those it already streamed (by run chain and sequence number, in this process); a retry on another
worker can repeat a few, which readers drop by ``data.event_id``. Best effort, like every stream
entry: a full queue or a store that is down drops entries (counted in the log), never an event of
the sink.

Taps are per task queue, because tests (and ``agent_worker.testing``) run several workers with
their own stores in one process.
"""

from __future__ import annotations

import queue
import threading
import time

import structlog
from agent_worker.activities.stores.streams import WRITER, StreamBackend
from agent_worker.schemas.events import Event
from agent_worker.schemas.streams import StreamEntry
from agent_worker.security.redact import redact_value
from temporalio import workflow

log = structlog.get_logger(__name__)

# Events waiting for the stream store past this many are dropped (and counted).
MAX_QUEUED = 50_000
BATCH = 500
# How long the writer waits for more events before it writes what it has.
LINGER_SECONDS = 0.01
# Run chains whose last streamed sequence number the tap remembers (for replays of failed tasks).
REMEMBERED = 10_000


class LiveEventTap:
    """Writes offered events to one stream backend, from its own thread."""

    def __init__(self, backend: StreamBackend) -> None:
        self.backend = backend
        self._queue: queue.Queue[Event | StreamEntry | None] = queue.Queue(MAX_QUEUED)
        self._last: dict[tuple[str, str | None], int] = {}
        self._sent: dict[tuple[str, str | None, str], None] = {}  # entries' keys, oldest first
        self.dropped = 0
        self._reported = 0
        self._thread = threading.Thread(target=self._run, name="live-events", daemon=True)
        self._thread.start()

    def offer(self, item: Event | StreamEntry) -> None:
        """Queue an event, or another entry (a command's output), for the stream; never waits."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued (for up to ``timeout`` seconds), then stop the thread."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch, stop = ([] if first is None else [first]), first is None
            deadline = time.monotonic() + LINGER_SECONDS
            while not stop and len(batch) < BATCH:
                try:
                    item = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                else:
                    batch.append(item)
            if batch:
                self._write(batch)
            if stop:
                return

    def _write(self, items: list[Event | StreamEntry]) -> None:
        now = time.time()
        by_stream: dict[tuple[str, str | None], list[StreamEntry]] = {}
        for item in items:
            if isinstance(item, StreamEntry):
                entry = self._entry(item, now)
                if entry is not None:
                    by_stream.setdefault((item.task_id, item.run_chain), []).append(entry)
                continue
            event, key = item, (item.task_id, item.run_chain)
            if event.seq <= self._last.get(key, 0):
                continue  # a failed workflow task's events, emitted again by its retry
            self._last[key] = event.seq
            data = event.model_dump(mode="json")
            data["data"] = redact_value(data["data"])
            # Built from the validated event's own dump: no second validation of the same values.
            by_stream.setdefault(key, []).append(
                StreamEntry.model_construct(
                    task_id=event.task_id,
                    run_chain=event.run_chain,
                    kind="event",
                    data=data,
                    at=now,
                    writer=WRITER,
                )
            )
        for seen in (self._last, self._sent):
            if len(seen) > REMEMBERED:  # (not a copy of every key per batch while under the bound)
                for old in list(seen)[: len(seen) - REMEMBERED]:
                    del seen[old]
        if self.dropped > self._reported:  # counted in the workflow thread, logged from here
            log.warning("live events dropped: the queue was full", count=self.dropped - self._reported)
            self._reported = self.dropped
        if len(by_stream) > 1:
            try:  # one call to the store for the batch's streams
                self.backend.append_many(by_stream)
                return
            except Exception as err:  # best effort: the sink has every event; try them one by one
                log.warning("events not streamed together", streams=len(by_stream), error=repr(err))
        for (task_id, chain), entries in by_stream.items():
            try:
                self.backend.append(task_id, chain, entries)
            except Exception as err:  # best effort: the sink has every event
                log.warning("events not streamed", task_id=task_id, count=len(entries), error=repr(err))

    def _entry(self, entry: StreamEntry, now: float) -> StreamEntry | None:
        """``entry`` redacted and stamped, or None when this process streamed it already."""
        key = (entry.task_id, entry.run_chain, f"{entry.kind}/{entry.data.get('call_id')}")
        if key in self._sent:
            return None
        self._sent[key] = None
        return entry.model_copy(update={"data": redact_value(entry.data), "at": now, "writer": WRITER})


_taps: dict[str, LiveEventTap] = {}


def register(task_queue: str, backend: StreamBackend) -> LiveEventTap:
    """Stream the events of the workflows that run on ``task_queue`` in this process to ``backend``
    (a tap registered before for the queue is closed)."""
    previous = _taps.pop(task_queue, None)
    if previous is not None:
        previous.close()
    tap = _taps[task_queue] = LiveEventTap(backend)
    return tap


def offer(item: Event | StreamEntry) -> None:
    """From workflow code: queue an event, or a command's output as a ``tool_result`` entry (keyed
    by its ``data.call_id``), for the live stream, if this process streams the tasks of the
    workflow's task queue. Nothing happens on replay: what a replay emits was streamed already."""
    if workflow.unsafe.is_replaying():
        return
    tap = _taps.get(workflow.info().task_queue)
    if tap is not None:
        tap.offer(item)


__all__ = ["LiveEventTap", "offer", "register"]
