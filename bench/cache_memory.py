"""Memory per cached workflow: what sizes the worker's workflow cache (``workflow_cache_mb``).

One ``agent-worker worker`` process parks ``bench-approval`` tasks (each waits for approval, the
state a cached task is usually in; started with the bare spec, the heaviest way a client can start
one, so that the budget holds for every client) in steps, and after each step reads its RSS and the
SDK's own count of cached workflows (``temporal_sticky_cache_size`` on ``/metrics``). It runs twice on one dev
server: with a cache big enough for every task, and with a small cache (``SMALL_CACHE``), where
parking costs the same activities and events but keeps no more workflows in memory once the first
steps have filled it. The MB per cached workflow is the slope of RSS over cached workflows in the
first run, less the slope of RSS over parked tasks in the second (least squares over the steps).
No cache at all is no baseline: with ``max_cached_workflows=0`` the SDK cancels and re-runs every
local activity (``tenants.admit``) at each eviction, and parking crawls.

Run: ``python -m bench.cache_memory [--quick] [--tasks N] [--steps K]`` (prints the figure; at full
size writes ``bench/results/cache_memory.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from agent_worker.cli.devserver import free_port
from agent_worker.schemas.config import DEFAULT_WORKFLOW_CACHE_MB, MB_PER_CACHED_WORKFLOW
from agent_worker.schemas.tasks import TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from bench.agents import approval_task
from bench.common import (
    Section,
    awaiting_on,
    bench_config,
    dev_server,
    gather_limited,
    load,
    rss_mb,
    scratch,
    spawn_agent_worker,
)

DEFAULT_TASKS = 600
DEFAULT_STEPS = 4
IN_FLIGHT = 16
# Room for the tasks being started at once (each is cached while its first workflow tasks run).
SMALL_CACHE = 4 * IN_FLIGHT
SETTLE_SECONDS = 3.0  # after a step has parked: the last activities and the allocator settle


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def _cache_size(port: int) -> float:
    """The SDK's count of cached workflows, summed over the worker's task queues."""
    text = _scrape(port)
    return sum(
        float(m) for m in re.findall(r"^temporal_sticky_cache_size\{[^}]*\} ([0-9.e+-]+)$", text, re.M)
    )


def _slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ``ys`` over ``xs``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


async def _parked(client: Any, queue: str, n: int, within: float) -> None:
    deadline = time.monotonic() + within
    query = awaiting_on(queue)
    while (await client.count_workflows(query)).count < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {n} tasks parked within {within:.0f} s")
        await asyncio.sleep(0.5)


async def _run(
    server: Any, tmp: Path, name: str, cache: int, n: int, steps: int
) -> list[tuple[int, float, float]]:
    """Park ``n`` tasks in ``steps`` steps on a worker caching ``cache`` workflows; return
    (parked, cached, RSS MB) after each step, the first row before any task."""
    config = bench_config(tmp / f"data-{name}")
    port = free_port()
    worker = await spawn_agent_worker(
        server.address,
        config,
        tmp / f"worker-{name}.log",
        AGENT_WORKER_METRICS_BIND=f"127.0.0.1:{port}",
        AGENT_WORKER_MAX_CACHED_WORKFLOWS=str(cache),
    )
    samples: list[tuple[int, float, float]] = []
    try:
        await asyncio.sleep(SETTLE_SECONDS)
        samples.append((0, 0.0, rss_mb(worker.pid)[0]))
        parked = 0
        for step in range(1, steps + 1):
            target = n * step // steps
            await gather_limited(
                IN_FLIGHT,
                (
                    server.client.start_workflow(
                        AgentTaskWorkflow.run,
                        # The bare spec, as a raw start by any Temporal client sends it: such a task
                        # begins on release 0.1 and weighs the most (six patch markers, each with
                        # an upsert, in its first workflow task), and the budget must hold for it.
                        # As AgentWorkerClient starts it (approval_task's input) it weighed 0.117
                        # and 0.124 MB (bench/findings.md, "What a cached workflow weighs").
                        approval_task(f"v{i}")["spec"],
                        id=f"cache-{name}-{i}-{uuid.uuid4().hex[:6]}",
                        task_queue=config.task_queue,
                        result_type=TaskResult,
                    )
                    for i in range(parked, target)
                ),
            )
            parked = target
            await _parked(server.client, config.task_queue, parked, 120 + 2 * n)
            await asyncio.sleep(SETTLE_SECONDS)
            cached = await asyncio.to_thread(_cache_size, port)
            rss = rss_mb(worker.pid)[0]
            samples.append((parked, cached, rss))
            print(f"{name}: {parked} parked, {cached:.0f} cached, RSS {rss:.1f} MB", flush=True)
    finally:
        await worker.stop()
    return samples


async def run(quick: bool = False, tasks: int | None = None, steps: int | None = None) -> Section:
    n = tasks or (20 if quick else DEFAULT_TASKS)
    k = steps or (2 if quick else DEFAULT_STEPS)
    section = Section("cache_memory", f"Memory per cached workflow ({n} tasks parked)", load=load())
    began = time.perf_counter()
    with scratch("cache-memory") as tmp:
        async with dev_server(tmp / "server") as server:
            cached = await _run(server, tmp, "cached", n + 100, n, k)
            gc.collect()
            uncached = await _run(server, tmp, "small", SMALL_CACHE, n, k)
    section.seconds = time.perf_counter() - began
    cached_slope = _slope([c for _, c, _ in cached], [r for _, _, r in cached])
    # From the step where the small cache is full: its RSS then grows only with what is not cached.
    full = [(p, r) for p, c, r in uncached if c >= SMALL_CACHE * 0.9] or [(p, r) for p, _, r in uncached]
    uncached_slope = _slope([p for p, _ in full], [r for _, r in full])
    per_workflow = cached_slope - uncached_slope
    section.headers = [
        "tasks parked",
        "cached, big cache",
        "RSS, big cache (MB)",
        f"cached, cache of {SMALL_CACHE}",
        f"RSS, cache of {SMALL_CACHE} (MB)",
    ]
    section.rows = [
        [str(p), f"{c:.0f}", f"{r:.1f}", f"{uc:.0f}", f"{u:.1f}"]
        for (p, c, r), (_, uc, u) in zip(cached, uncached, strict=True)
    ]
    section.notes += [
        f"**MB per cached workflow: {per_workflow:.3f}** (RSS slope with the cache on, "
        f"{cached_slope * 1000:.0f} KB per cached workflow, less the slope with the small cache once "
        f"full, {uncached_slope * 1000:.0f} KB per parked task). The configuration's figure "
        f"(`schemas.config.MB_PER_CACHED_WORKFLOW`) is {MB_PER_CACHED_WORKFLOW}; at it, the default "
        f"budget of {DEFAULT_WORKFLOW_CACHE_MB:g} MB (`AGENT_WORKER_WORKFLOW_CACHE_MB`) holds "
        f"{int(DEFAULT_WORKFLOW_CACHE_MB / MB_PER_CACHED_WORKFLOW)} workflows, and at the figure "
        f"measured here {int(DEFAULT_WORKFLOW_CACHE_MB / per_workflow) if per_workflow > 0 else 0}.",
        "Each task is a `bench-approval` task parked on its approval (one turn, one proposed business "
        "write, events delivered), started with the bare spec as any Temporal client can (release "
        "0.1: six patch markers in its first workflow task, the heaviest start; as `AgentWorkerClient` "
        "starts it, about 0.12 MB), on one worker process with the product's other defaults and "
        f"scripted models. RSS is read {SETTLE_SECONDS:.0f} s after each step has parked; the SDK's "
        "gauge is summed over the worker's task queues.",
    ]
    section.figures = {
        "mb_per_cached_workflow": per_workflow,
        "cached_slope_mb": cached_slope,
        "uncached_slope_mb": uncached_slope,
        "tasks": float(n),
    }
    print(f"MB per cached workflow: {per_workflow:.3f}", flush=True)
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument("--tasks", type=int, help=f"tasks to park (default {DEFAULT_TASKS})")
    parser.add_argument("--steps", type=int, help=f"steps to park them in (default {DEFAULT_STEPS})")
    parser.add_argument("--out", help="file for the report (default bench/results/cache_memory.md)")
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.tasks, args.steps), args.quick, args.out)


if __name__ == "__main__":
    main()
