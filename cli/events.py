"""``agent-worker events ID [--follow] [--json]``: a task's event timeline.

Events come from the event sink when it can be read (the default JSON-lines sink in the data dir, or
the PostgreSQL sink of ``state_backend=postgres``: the whole stream), otherwise from the task's ``status``
query (its latest events).

With ``--follow`` and a stream backend configured (``stream_backend``, the workers'), the task's
live stream is shown between the events as it is written: the model's text as it arrives, tool
calls, read-tool results and turn boundaries; a retried turn's partial answer is marked superseded.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from agent_worker.cli import render
from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.cli.tasks import POLL_SECONDS
from agent_worker.schemas.events import Event

if TYPE_CHECKING:
    from agent_worker.activities.events import EventSink
    from agent_worker.activities.stores.streams import StreamBackend
    from agent_worker.schemas.streams import StreamEntry

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``events``."""
    events = sub.add_parser("events", help="a task's event timeline (readable, or JSON lines)")
    events.add_argument("task_id")
    events.add_argument("--follow", action="store_true", help="keep printing new events until the task ends")
    events.add_argument("--json", action="store_true", help="one JSON event per line")
    events.set_defaults(handler=cmd_events)


def _stored(sink: EventSink, task_id: str, chain: str | None) -> list[Event]:
    """The current run chain's stored events (a task started before run chains has none of its own:
    its events carry no chain)."""
    read_chain = sink.read_chain  # type: ignore[attr-defined]
    return list(read_chain(task_id, chain)) or list(read_chain(task_id, None))


async def cmd_events(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    # The stores (and what they load) only when this command runs: not for every other command.
    from agent_worker.activities.stores.state import build_event_sink, build_stream_backend
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    out = out or sys.stdout
    config = ctx.config
    sink = build_event_sink(config) if not config.event_sink else None
    tasks = await ctx.tasks()
    handle = tasks.handle(args.task_id)
    seen = 0
    # A reused task id keeps each run chain's events in the same file: show the current chain's.
    try:
        chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id or None
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise CliError(f"no task {args.task_id!r}") from None
        raise
    if not args.json:
        from agent_worker.cli.forks import fork_tree

        for line in await fork_tree(tasks.temporal, args.task_id):  # a fork's parent and its forks
            print(line, file=out)
        print(render.TIMELINE_HEADER, file=out)
    backend = build_stream_backend(config) if args.follow else None
    live = _LiveStream(backend, args.task_id, chain, args.json, out)
    while True:
        events = _stored(sink, args.task_id, chain) if sink else []
        if not events or args.follow:
            # The sink may lag the task by a batch; the status query has the newest events.
            tail = (await tasks.status(args.task_id)).last_events
            events = sorted({e.seq: e for e in [*events, *tail]}.values(), key=lambda e: e.seq)
        for event in events:
            if event.seq > seen:
                seen = event.seq
                live.line(event.model_dump_json(by_alias=True) if args.json else render.timeline_line(event))
        if not args.follow:
            return 0
        running = (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
        if live.backend is None:
            if not running:
                return 0
            await asyncio.sleep(POLL_SECONDS)
            continue
        if not running:  # every entry is written before the turn ends: drain them, then stop
            while await live.show(wait_ms=0):
                pass
            live.line("")
            return 0
        # The live stream as it comes, until the next look at the task's events.
        deadline = time.monotonic() + POLL_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            await live.show(wait_ms=int(left * 1000))


class _LiveStream:
    """Prints a task's live stream: text inline as it arrives, everything else on its own line."""

    def __init__(
        self, backend: StreamBackend | None, task_id: str, chain: str | None, as_json: bool, out: TextIO
    ) -> None:
        self.backend = backend
        self.task_id = task_id
        self.chain = chain
        self.as_json = as_json
        self.out = out
        self.after = 0
        self._mid_text = False

    def line(self, text: str) -> None:
        if self._mid_text:
            print(file=self.out)
            self._mid_text = False
        if text:
            print(text, file=self.out, flush=True)

    async def show(self, wait_ms: int) -> int:
        """Print the entries written since the last call (waiting up to ``wait_ms`` for one); how
        many there were. A stream store that cannot be read shows nothing (it is best effort)."""
        assert self.backend is not None
        try:
            entries = await asyncio.to_thread(
                self.backend.read, self.task_id, self.chain, self.after, 500, wait_ms
            )
        except Exception:
            await asyncio.sleep(wait_ms / 1000)
            return 0
        for entry in entries:
            self.after = entry.offset
            if self.as_json:
                self.line(entry.model_dump_json())
            elif entry.kind == "token":
                self.out.write(str(entry.data.get("text", "")))
                self.out.flush()
                self._mid_text = True
            else:
                self.line(stream_line(entry))
        return len(entries)


def stream_line(entry: StreamEntry) -> str:
    """A stream entry other than text, for people."""
    data, where = entry.data, f"turn {entry.turn}"
    if entry.kind == "step":
        extra = " ".join(f"{k}={v}" for k, v in data.items() if k != "step")
        return f"  ~ {where} {data.get('step', '')} {extra}".rstrip()
    if entry.kind == "tool_call":
        return f"  ~ {where} calls {data.get('name', '?')}"
    if entry.kind == "tool_result":
        return f"  ~ {where} {data.get('name', '?')} answered ({data.get('chars', 0)} chars)"
    if entry.kind == "superseded":
        if data.get("call") is not None:
            return f"  ~ {where}: the text above is superseded ({data.get('model', 'a model')} failed)"
        return f"  ~ {where}: attempt {entry.attempt} starts over; earlier text of this turn is superseded"
    return f"  ~ {where} {entry.kind} {data}"
