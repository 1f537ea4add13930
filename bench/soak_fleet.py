"""The chaos soak's workers: worker processes of one task queue, one per slot, SIGKILLed at random
and restarted (``bench.soak``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Chaos:
    kills: int = 0
    restarts: int = 0
    killed: list[tuple[datetime, int]] = field(default_factory=list)  # when, which slot


class Fleet:
    """Worker processes of one task queue, one per slot (each slot with its own environment: its
    data dir), killed and restarted on demand."""

    def __init__(self, envs: list[dict[str, str]], logs: Path) -> None:
        self.envs, self.logs = envs, logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_files: list[Path] = []
        self.slot_of_pid: dict[int, int] = {}  # every process a slot ever ran (Temporal identity pid@host)
        self.started = 0
        for n in range(len(envs)):
            proc, log = self._spawn(n)
            self.procs.append(proc)
            self.log_files.append(log)

    def ready(self, n: int) -> bool:
        """Whether worker ``n`` is polling (it logged its start)."""
        return self.procs[n].poll() is None and "worker started" in self.log_files[n].read_text()

    async def wait_ready(self, within: float = 120) -> None:
        """Return once every worker polls; a worker that exits on its own first is an error."""
        deadline = time.monotonic() + within
        while not all(self.ready(n) for n in range(len(self.procs))):
            for n, proc in enumerate(self.procs):
                if proc.poll() is not None:
                    tail = self.log_files[n].read_text()[-2000:]
                    raise RuntimeError(f"worker {n + 1} exited {proc.returncode} at start:\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not start within {within:g} s (logs in {self.logs})")
            await asyncio.sleep(0.5)

    def _spawn(self, n: int) -> tuple[subprocess.Popen[bytes], Path]:
        self.started += 1
        log = self.logs / f"worker-{self.started}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agent_worker.cli.main", "worker"],
                env=self.envs[n],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.slot_of_pid[proc.pid] = n
        return proc, log

    def kill_one(self, rng: random.Random) -> int | None:
        """SIGKILL a random polling worker, as long as another one polls too (a fleet that never
        finishes starting would measure nothing); returns its slot, or None."""
        ready = [n for n in range(len(self.procs)) if self.ready(n)]
        if len(ready) < 2:
            return None
        n = rng.choice(ready)
        victim = self.procs[n]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        return n

    def restart(self, n: int) -> None:
        self.procs[n], self.log_files[n] = self._spawn(n)

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


async def chaos_loop(fleet: Fleet, rng: random.Random, every: tuple[float, float], chaos: Chaos) -> None:
    while True:
        await asyncio.sleep(rng.uniform(*every))
        n = fleet.kill_one(rng)
        if n is None:
            continue
        chaos.kills += 1
        chaos.killed.append((datetime.now(UTC), n))
        await asyncio.sleep(rng.uniform(0.2, 2.0))
        fleet.restart(n)
        chaos.restarts += 1
