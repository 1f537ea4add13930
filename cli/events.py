"""``agent-worker events ID [--follow] [--json]``: a task's event timeline.

Events come from the event sink when this machine can read it (the default JSON-lines sink in the
data dir: the whole stream), otherwise from the task's ``status`` query (its latest events).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, TextIO

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.events import JsonlEventSink
from cli import render
from cli.tasks import POLL_SECONDS, CliError, query_status
from schemas.config import WorkerConfig
from schemas.events import Event


def _line(event: Event) -> str:
    summary = render._event_summary(event.data)[:120]
    return f"{event.seq:>5}  {event.at:%Y-%m-%d %H:%M:%S}  {event.type.value:<22} {event.phase:<18} {summary}"


def _stored(sink: JsonlEventSink, task_id: str, chain: str | None) -> list[Event]:
    """The current run chain's stored events (a task started before run chains has none of its own:
    its events carry no chain)."""
    if not sink.path(task_id).exists():
        return []
    return list(sink.read_chain(task_id, chain)) or list(sink.read_chain(task_id, None))


async def cmd_events(client: Client, args: Any, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    config = WorkerConfig.from_env(os.environ)
    sink = JsonlEventSink(config.events_dir) if not config.event_sink else None
    handle = client.get_workflow_handle(args.task_id)
    seen = 0
    # A reused task id keeps each run chain's events in the same file: show the current chain's.
    try:
        chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id or None
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise CliError(f"no task {args.task_id!r}") from None
        raise
    if not args.json:
        print(f"{'seq':>5}  {'time (UTC)':<19}  {'event':<22} {'phase':<18} details", file=out)
    while True:
        events = _stored(sink, args.task_id, chain) if sink else []
        if not events or args.follow:
            # The sink may lag the task by a batch; the status query has the newest events.
            tail = (await query_status(handle)).last_events
            events = sorted({e.seq: e for e in [*events, *tail]}.values(), key=lambda e: e.seq)
        for event in events:
            if event.seq > seen:
                seen = event.seq
                print(event.model_dump_json(by_alias=True) if args.json else _line(event), file=out)
        if not args.follow or (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING:
            return 0
        await asyncio.sleep(POLL_SECONDS)
