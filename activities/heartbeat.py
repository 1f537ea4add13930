"""Heartbeating while long activity work runs, so a dead worker is noticed and cancels arrive."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio import activity

# This process, as a heartbeat names it: a retry that finds another process's heartbeat took over
# the work of a worker that stopped answering.
PROCESS = f"{os.getpid()}@{socket.gethostname()}"


def beat_details() -> dict[str, Any]:
    """What each heartbeat records by default: when, and from which process."""
    return {"at": time.time(), "process": PROCESS}


def previous_beat() -> dict[str, Any] | None:
    """The last heartbeat's details of this activity's previous attempt (None on a first attempt,
    in a local activity, or when it left none of ours)."""
    if not activity.in_activity():
        return None
    info = activity.info()
    if info.is_local or info.attempt <= 1 or not info.heartbeat_details:
        return None
    last = info.heartbeat_details[-1]
    return last if isinstance(last, dict) else None


def taken_over_after() -> float | None:
    """Seconds from the last heartbeat of this activity's previous attempt, made by another process,
    to now (this attempt's start): the takeover time after a worker loss. None on a first attempt, in
    a local activity, or when the previous attempt left no heartbeat from another process."""
    last = previous_beat()
    if last is None or not isinstance(last.get("at"), int | float) or last.get("process") == PROCESS:
        return None
    return round(max(0.0, time.time() - float(last["at"])), 3)


@contextlib.asynccontextmanager
async def heartbeating(
    every: float = 2.0, details: Callable[[], Any] = beat_details, *, first_at_once: bool = False
) -> AsyncIterator[None]:
    """Heartbeat every ``every`` seconds while the block runs, with ``details()`` (no-op outside an
    activity, and in a local activity, which has no heartbeats).

    The first beat comes after ``every`` seconds, so work done sooner sends none: each beat is an RPC
    and a write to the task's state on the server, and an approval's two short activities (the write,
    the model's answer) spent two of them (bench/findings.md, "Heartbeats"). ``first_at_once`` beats at
    the start, for details a retry must find even when the worker is lost in the first seconds (a
    sandbox command's home queue)."""
    if not activity.in_activity() or activity.info().is_local:
        yield
        return
    loop = asyncio.get_running_loop()
    beating: asyncio.Task[None] | None = None

    async def beat() -> None:
        while True:
            activity.heartbeat(details())
            await asyncio.sleep(every)

    def start() -> None:
        nonlocal beating
        beating = loop.create_task(beat())  # in the activity's context, which the handle carries

    # Until the first beat is due, a timer handle, not a task: most activities end sooner, and a task
    # to create, cancel and wait for was a cost of every one of them.
    first = None
    if first_at_once:
        start()
    else:
        first = loop.call_later(every, start)
    try:
        yield
    finally:
        if first is not None:
            first.cancel()
        if beating is not None:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
