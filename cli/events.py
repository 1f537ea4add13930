"""``agent-worker events ID [--follow] [--json]``: a task's event timeline.

Events come from the event sink when it can be read (the default JSON-lines sink in the data dir, or
the PostgreSQL sink of ``state_backend=postgres``: the whole stream), otherwise from the task's ``status``
query (its latest events).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from activities.events import EventSink
from activities.stores.state import build_event_sink
from cli import render
from cli.context import CliContext
from cli.errors import CliError
from cli.tasks import POLL_SECONDS
from schemas.events import Event

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
        print(render.TIMELINE_HEADER, file=out)
    while True:
        events = _stored(sink, args.task_id, chain) if sink else []
        if not events or args.follow:
            # The sink may lag the task by a batch; the status query has the newest events.
            tail = (await tasks.status(args.task_id)).last_events
            events = sorted({e.seq: e for e in [*events, *tail]}.values(), key=lambda e: e.seq)
        for event in events:
            if event.seq > seen:
                seen = event.seq
                print(
                    event.model_dump_json(by_alias=True) if args.json else render.timeline_line(event),
                    file=out,
                )
        if not args.follow or (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING:
            return 0
        await asyncio.sleep(POLL_SECONDS)
