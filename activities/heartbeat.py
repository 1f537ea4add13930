"""Heartbeating while long activity work runs, so a dead worker is noticed and cancels arrive."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio import activity


@contextlib.asynccontextmanager
async def heartbeating(every: float = 2.0, details: Callable[[], Any] | None = None) -> AsyncIterator[None]:
    """Heartbeat every ``every`` seconds while the block runs (no-op outside an activity, and in a
    local activity, which has no heartbeats)."""
    if not activity.in_activity() or activity.info().is_local:
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat(*(() if details is None else (details(),)))
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
