"""4. Crash recovery: SIGKILL a busy worker process; how long until its tasks progress again, and how
many model calls run twice.

Two worker processes share a task queue and run K ``bench-notes`` tasks (one turn of seven slow
model calls each, every call logged with its task, process and time). While calls are in flight,
one process is killed. For every task that had a call in flight there, recovery is the time from
the kill to its next logged call (made by the surviving process). Repeated calls are logged calls
with a (task, call index) seen before. The baseline is the same with ``BareSlow`` workflows: one
activity of seven slow steps that heartbeats its progress and resumes from it on retry, with the
same heartbeat timeout (10 s) and throttle (2 s) as agent-worker.

Run: ``python -m bench.crash [--quick] [--tasks K]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from bench.agents import CALL_LOG_ENV
from bench.common import (
    Proc,
    Section,
    bench_config,
    dev_server,
    gather_limited,
    load,
    median,
    row,
    scratch,
    spawn_agent_worker,
    spawn_bare_worker,
)


def _calls(log: Path) -> list[tuple[str, int, int, float]]:
    """(task, pid, index, time) of every logged call."""
    if not log.exists():
        return []
    lines = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [(t, int(pid), int(i), float(at)) for t, pid, i, at in lines]


async def _crash(
    workers: list[Proc], handles: list[Any], log: Path, results: Callable[[], Awaitable[Any]]
) -> dict[str, float]:
    """Once every task has made two calls, kill the worker that has a task mid-turn (the one that made
    the latest call), then wait for every task and measure."""
    deadline = time.monotonic() + 120
    while True:
        calls = _calls(log)
        per_task = Counter(task for task, *_ in calls)
        finished = {task for task, _, index, _ in calls if index >= 6}
        busy = [(at, pid) for task, pid, _, at in calls if task not in finished and at > time.time() - 1]
        if all(per_task[h.id] >= 2 for h in handles) and busy:
            break
        if time.monotonic() > deadline or len(finished) == len(handles):
            raise RuntimeError(f"no worker was caught mid-turn: calls per task {dict(per_task)}")
        await asyncio.sleep(0.05)
    victim = next(w for w in workers if w.pid == max(busy)[1])
    killed_at = time.time()
    os.kill(victim.pid, signal.SIGKILL)
    await asyncio.to_thread(victim.popen.wait, 10)
    before = _calls(log)
    await results()
    calls = _calls(log)
    last_before = {task: (pid, index) for task, pid, index, _ in before}
    finished = {task for task, _, index, _ in before if index >= 6}
    affected = [t for t, (pid, _) in last_before.items() if pid == victim.pid and t not in finished]
    recovery = []
    for task in affected:
        after = [at for t, _, _, at in calls if t == task and at > killed_at]
        if after:
            recovery.append(min(after) - killed_at)
    seen = Counter((task, index) for task, _, index, _ in calls)
    return {
        "affected": len(affected),
        "recovery_median_s": median(recovery) if recovery else float("nan"),
        "recovery_max_s": max(recovery) if recovery else float("nan"),
        "repeated": sum(n - 1 for n in seen.values()),
        "calls": len(calls),
    }


async def _ours(server: Any, tmp: Path, k: int) -> dict[str, float]:
    config = bench_config(tmp / "data")
    log = tmp / "calls.log"
    workers = await asyncio.gather(
        *(
            spawn_agent_worker(server.address, config, tmp / f"worker-{n}.log", **{CALL_LOG_ENV: str(log)})
            for n in range(2)
        )
    )
    try:
        handles = await asyncio.gather(
            *(
                server.client.start_workflow(
                    AgentTaskWorkflow.run,
                    {"agent": "bench-notes", "prompt": "take your notes"},
                    id=f"crash-{i}-{uuid.uuid4().hex[:6]}",
                    task_queue=config.task_queue,
                    result_type=TaskResult,
                )
                for i in range(k)
            )
        )
        done: list[TaskResult] = []

        async def results() -> None:
            done.extend(await asyncio.wait_for(gather_limited(k, (h.result() for h in handles)), 180))

        figures = await _crash(workers, handles, log, results)
    finally:
        for worker in workers:
            await worker.stop()
    assert all(r.phase is TaskPhase.COMPLETED and r.final_output == "took 6 notes" for r in done), done
    figures["replayed"] = sum(r.usage.replayed_model_calls for r in done)
    return figures


async def _bare(server: Any, tmp: Path, k: int) -> dict[str, float]:
    queue = f"bare-{uuid.uuid4().hex[:8]}"
    log = tmp / "bare-calls.log"
    workers = await asyncio.gather(
        *(
            spawn_bare_worker(
                server.address, queue, tmp / "bare", tmp / f"bare-{n}.log", **{CALL_LOG_ENV: str(log)}
            )
            for n in range(2)
        )
    )
    try:
        handles = await asyncio.gather(
            *(
                server.client.start_workflow(
                    "BareSlow", id=f"bare-crash-{i}-{uuid.uuid4().hex[:6]}", task_queue=queue
                )
                for i in range(k)
            )
        )

        async def results() -> None:
            await asyncio.wait_for(gather_limited(k, (h.result() for h in handles)), 180)

        return await _crash(workers, handles, log, results)
    finally:
        for worker in workers:
            await worker.stop()


async def run(quick: bool = False, tasks: int | None = None) -> Section:
    k = tasks or (2 if quick else 6)
    section = Section("crash", "4. Crash recovery (SIGKILL of a busy worker)", load=load())
    began = time.perf_counter()
    with scratch("crash") as tmp:
        async with dev_server(tmp / "server") as server:
            if quick:  # side by side: only checks that it works, and saves a minute
                ours, bare = await asyncio.gather(_ours(server, tmp, k), _bare(server, tmp, k))
            else:
                ours = await _ours(server, tmp, k)
                bare = await _bare(server, tmp, k)
    section.seconds = time.perf_counter() - began
    section.headers = ["measure", "agent-worker", "bare Temporal", "ratio"]
    section.rows = [
        row("tasks with work in flight on the killed worker", ours["affected"], bare["affected"])[:3] + [""],
        row("kill to next progress, median s", ours["recovery_median_s"], bare["recovery_median_s"], 1),
        row("kill to next progress, max s", ours["recovery_max_s"], bare["recovery_max_s"], 1),
        row("model calls (steps) made twice", ours["repeated"], bare["repeated"])[:3] + [""],
        ["model calls answered from the journal", f"{ours['replayed']:.0f}", "", ""],
    ]
    section.notes.append(
        f"{k} tasks on two worker processes; one is killed while calls are in flight and the other carries "
        "on (no restart, so Python start-up is not counted). What bounds recovery is the activity heartbeat "
        "timeout (10 s, `workflows/options.py`) plus the first retry interval (1 s); workflow tasks "
        "move off the dead worker's sticky queue after 10 s (`sticky_timeout_seconds`). A worker "
        "process takes several seconds just to import (the openai-agents SDK alone took ~8 s under "
        "load here), which a restart would add."
    )
    section.figures = {
        **{k: float(v) for k, v in ours.items()},
        **{f"bare_{k}": float(v) for k, v in bare.items()},
    }
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument("--tasks", type=int)
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.tasks), args.quick)


if __name__ == "__main__":
    main()
