"""A loaded machine for the tests that must hold under load: CPU burners (busy Python processes,
as many as asked) started and stopped by pid, and a wait until the 1-minute load average reaches
a level. Nothing here measures time: the caller asserts the load, never how long anything took."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

# Burners beyond the target: the load average counts runnable processes, and the machine's own
# work (the server, the worker, other tests) comes and goes.
EXTRA_BURNERS = 2
# The 1-minute load average closes about two thirds of its gap a minute: from idle to 5 takes one
# to two minutes with this many burners; past this the machine cannot be loaded as asked.
LOADED_WITHIN_SECONDS = 300
# How far past ``level`` the load is driven before burners beyond ``keep`` are stopped: the 1-minute
# average decays toward what is left while the caller sets up (a worker, a task), and must still
# read ``level`` when the caller's block begins.
HEADROOM = 0.75


def _burners(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` busy Python processes, each in its own session."""
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(count)
    ]


@contextlib.asynccontextmanager
async def loaded_to(level: float, keep: int | None = None) -> AsyncIterator[float]:
    """Bring the machine to a 1-minute load average of at least ``level`` (``level + HEADROOM`` when
    burners are to be stopped), then run the block with ``keep`` burners left (all of them when
    None): a block that is itself busy (a flood keeps the server, the worker and the test runnable)
    holds the load with fewer, and gets more of the CPU for its own work. Yields the load average
    reached; the caller checks it again after the block. The burners are this process's children,
    killed by pid at the end."""
    target = level if keep is None else level + HEADROOM
    burners = _burners(int(target) + EXTRA_BURNERS)
    try:
        for _ in range(LOADED_WITHIN_SECONDS):
            if os.getloadavg()[0] >= target:
                break
            await asyncio.sleep(1)
        reached = os.getloadavg()[0]
        assert reached >= target, f"the machine did not reach load {target} (at {reached:.2f})"
        if keep is not None:
            _kill(burners[keep:])
            burners = burners[:keep]
        yield reached
    finally:
        _kill(burners)


def _kill(burners: list[subprocess.Popen[bytes]]) -> None:
    for burner in burners:
        with contextlib.suppress(ProcessLookupError):
            os.kill(burner.pid, signal.SIGKILL)
        burner.wait()
