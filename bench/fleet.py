"""7. Fleet: tasks per second with 1, 2 and 4 worker processes when every model call takes 200 ms.

Each configuration gets its own task queue on one dev server and runs M ``bench-slow-counter`` tasks
(``count to 2``: three model calls of 200 ms, two sandbox commands), all started at once. Throughput
is M over the time from the first start to the last result. The baseline is one process.

Run: ``python -m bench.fleet [--quick] [--tasks M] [--processes 1,2,4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from bench.agents import DEFAULT_LATENCY_MS, LATENCY_ENV, counting_task
from bench.common import (
    Section,
    bench_config,
    cpu_seconds,
    dev_server,
    gather_limited,
    load,
    ratio,
    scratch,
    spawn_agent_worker,
)

STEPS = 2


async def _fleet(server: Any, tmp: Path, processes: int, m: int) -> dict[str, float]:
    config = bench_config(tmp / f"data-{processes}")
    workers = await asyncio.gather(
        *(
            spawn_agent_worker(
                server.address,
                config,
                tmp / f"worker-{processes}-{n}.log",
                **{LATENCY_ENV: str(DEFAULT_LATENCY_MS)},
            )
            for n in range(processes)
        )
    )
    try:
        cpu_before = sum(cpu_seconds(w.pid) for w in workers)
        started = time.perf_counter()
        handles = await gather_limited(
            64,
            (
                server.client.start_workflow(
                    AgentTaskWorkflow.run,
                    counting_task(STEPS, agent="bench-slow-counter"),
                    id=f"fleet-{processes}-{i}-{config.task_queue}",
                    task_queue=config.task_queue,
                    result_type=TaskResult,
                )
                for i in range(m)
            ),
        )
        results: list[TaskResult] = await gather_limited(256, (h.result() for h in handles))
        seconds = time.perf_counter() - started
        cpu = sum(cpu_seconds(w.pid) for w in workers) - cpu_before
    finally:
        for worker in workers:
            await worker.stop()
    assert all(r.phase is TaskPhase.COMPLETED for r in results), {r.phase for r in results}
    return {"tasks_per_s": m / seconds, "seconds": seconds, "cpu_ms_per_task": cpu * 1000 / m}


async def run(quick: bool = False, tasks: int | None = None, processes: list[int] | None = None) -> Section:
    m = tasks or (6 if quick else 100)
    counts = processes or ([1, 2] if quick else [1, 2, 4])
    section = Section("fleet", f"7. Fleet: {m} tasks, model latency {DEFAULT_LATENCY_MS} ms", load=load())
    began = time.perf_counter()
    figures: dict[int, dict[str, float]] = {}
    with scratch("fleet") as tmp:
        async with dev_server(tmp / "server") as server:
            for p in counts:
                figures[p] = await _fleet(server, tmp, p, m)
    section.seconds = time.perf_counter() - began
    base = figures[counts[0]]["tasks_per_s"]
    section.headers = ["worker processes", "tasks/s", "vs 1 process", "seconds", "worker CPU ms per task"]
    section.rows = [
        [str(p), f"{f['tasks_per_s']:.2f}", ratio(f["tasks_per_s"], base), f"{f['seconds']:.1f}"]
        + [f"{f['cpu_ms_per_task']:.0f}"]
        for p, f in figures.items()
    ]
    model_floor = (STEPS + 1) * DEFAULT_LATENCY_MS / 1000
    section.notes.append(
        f"Each task spends {model_floor:.1f} s waiting for its model; with 64 activity slots per process, "
        f"model latency alone would allow up to {64 / model_floor:.0f} tasks/s per process. The figures "
        "are bounded instead by CPU (2 cores shared by the server, the workers and this client) and the "
        "dev server: the worker CPU per task shows what each task costs."
    )
    section.figures = {f"tasks_per_s_{p}": f["tasks_per_s"] for p, f in figures.items()}
    section.figures.update({f"cpu_ms_per_task_{p}": f["cpu_ms_per_task"] for p, f in figures.items()})
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument("--tasks", type=int)
    parser.add_argument("--processes", help="comma-separated process counts, the first is the baseline")
    args = parser.parse_args()
    from bench.report import standalone

    counts = [int(p) for p in args.processes.split(",")] if args.processes else None
    standalone(run(args.quick, args.tasks, counts), args.quick)


if __name__ == "__main__":
    main()
