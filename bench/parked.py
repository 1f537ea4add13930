"""3. Parked approvals: N tasks waiting for approval, then all approved at once.

agent-worker: N ``bench-approval`` tasks, each proposing one business write that needs approval, on
one worker process with the product's default settings. Once all wait: the worker's memory and the
server's database size. Then one ``submit_decision`` signal per task, as fast as the client sends
them: throughput, approval-to-commit latency (signal sent to the business row's ``committed_at``),
and duplicates (rows per task). The baseline is N ``BareApproval`` workflows on a bare worker
process: wait for a signal, insert one row.

Run: ``python -m bench.parked [--quick] [--tasks N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sqlite3
import time
import urllib.request
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agent_worker.cli.devserver import free_port
from agent_worker.schemas.approvals import ApprovalRequest
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.service import RPCError

from bench.agents import APPROVER, approval_task
from bench.common import (
    Section,
    Target,
    awaiting_on,
    bench_config,
    cpu_seconds,
    dev_server,
    gather_limited,
    group_cpu_seconds,
    load,
    percentile,
    row,
    rss_mb,
    scratch,
    spawn_agent_worker,
    spawn_bare_worker,
)

DEFAULT_TASKS = 500
RSS_TARGET_MB = 300
IN_FLIGHT = 64  # client calls in flight at once (starts, signals)
# Queries replay evicted tasks on the one worker: at 64 in flight, some of 10,000 timed out.
QUERY_IN_FLIGHT = 16
QUERY_ATTEMPTS = 5
QUERY_TIMEOUT = timedelta(seconds=60)


async def _wait_parked(client: Any, queue: str, n: int, within: float, log: Path, pid: int) -> list[str]:
    """Wait until ``n`` tasks wait for approval; return the worker's RSS each time a further tenth
    of them had parked (printed as it goes, so a long run shows progress)."""
    deadline = time.monotonic() + within
    query = awaiting_on(queue)
    samples: list[str] = []
    while (parked := (await client.count_workflows(query)).count) < n:
        if parked >= (len(samples) + 1) * n / 10:
            samples.append(f"{parked}: {rss_mb(pid)[0]:.0f} MB")
            print(f"parked {samples[-1]} RSS", flush=True)
        if time.monotonic() > deadline:
            tail = (await asyncio.to_thread(log.read_text, errors="replace"))[-3000:]
            raise RuntimeError(
                f"only {parked} of {n} tasks parked within {within:.0f} s; worker log:\n{tail}"
            )
        await asyncio.sleep(0.5)
    return samples


async def _pending(handle: Any) -> list[ApprovalRequest]:
    """The task's pending approvals. A parked task is usually out of the worker's cache, so each
    query replays it; under a burst of them a query can time out, and is asked again."""
    for attempt in range(1, QUERY_ATTEMPTS + 1):
        try:
            return await handle.query(AgentTaskWorkflow.pending_approvals, rpc_timeout=QUERY_TIMEOUT)
        except RPCError:
            if attempt == QUERY_ATTEMPTS:
                raise
            await asyncio.sleep(attempt)
    raise AssertionError("unreachable")


def cache_counts(port: int) -> tuple[float, float, Counter[str]]:
    """(hits, misses) of the worker's sticky workflow cache so far, and its requests to the server by
    operation (the SDK's ``temporal_request`` and ``temporal_long_request``), from its ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()

    def total(name: str) -> float:
        return sum(float(v) for v in re.findall(rf"^{name}(?:_total)?(?:{{[^}}]*}})? (\S+)$", text, re.M))

    requests: Counter[str] = Counter()
    for labels, value in re.findall(r"^temporal_(?:long_)?request(?:_total)?\{([^}]*)\} (\S+)$", text, re.M):
        operation = re.search(r'operation="([^"]+)"', labels)
        requests[operation.group(1) if operation else "?"] += float(value)
    return total("temporal_sticky_cache_hit"), total("temporal_sticky_cache_miss"), requests


def _commits(db: Path, sql: str) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        return {task: datetime.fromisoformat(at).timestamp() for task, at in conn.execute(sql)}


def _figures(sent: dict[str, float], committed: dict[str, float], done: float) -> dict[str, float]:
    latencies = [(committed[t] - sent[t]) * 1000 for t in sent if t in committed]
    first = min(sent.values())
    return {
        "p50_ms": percentile(latencies, 0.5),
        "p95_ms": percentile(latencies, 0.95),
        "commits_per_s": len(committed) / max(max(committed.values()) - first, 1e-3),
        "completions_per_s": len(sent) / max(done - first, 1e-3),
    }


async def park_ours(
    server: Any,
    tmp: Path,
    n: int,
    section: Section,
    cache: int | None = None,
    worker_env: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Park ``n`` tasks on one worker process (caching ``cache`` workflows, default: the product's
    default; with ``worker_env`` added to its environment; with ``spec``'s fields added to each
    task's spec), approve them all, and return the figures; with the worker's cache hits and misses
    from its ``/metrics`` in the approval phase."""
    config = bench_config(tmp / "data")
    port = free_port()
    env = {"AGENT_WORKER_METRICS_BIND": f"127.0.0.1:{port}", **(worker_env or {})}
    if cache is not None:
        env["AGENT_WORKER_MAX_CACHED_WORKFLOWS"] = str(cache)
    worker = await spawn_agent_worker(server.address, config, tmp / "worker.log", **env)
    try:
        idle_rss, _ = rss_mb(worker.pid)
        cpu_start = cpu_seconds(worker.pid)
        db_before = server.db_mb()
        ids = [f"park-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
        started = time.perf_counter()
        handles = await gather_limited(
            IN_FLIGHT,
            (
                server.client.start_workflow(
                    AgentTaskWorkflow.run, approval_task(f"v{i}", **(spec or {})), id=task_id,
                    task_queue=config.task_queue, result_type=TaskResult,
                )
                for i, task_id in enumerate(ids)
            ),
        )  # fmt: skip
        samples = await _wait_parked(server.client, config.task_queue, n, 60 + 2 * n, worker.log, worker.pid)
        if samples:
            section.notes.append(f"Worker RSS as tasks parked (tasks parked: RSS): {'; '.join(samples)}.")
        park_seconds = time.perf_counter() - started
        parked_rss, parked_peak = rss_mb(worker.pid)
        cpu_parked = cpu_seconds(worker.pid)
        db_parked = server.db_mb()
        # Kept in the log at once: a failure in the long approval phase must not lose these.
        print(f"all {n} parked in {park_seconds:.0f} s: RSS {parked_rss:.0f} MB (peak {parked_peak:.0f}), "
              f"server database {db_parked:.1f} MB", flush=True)  # fmt: skip
        query_started = time.perf_counter()
        pending: list[list[ApprovalRequest]] = await gather_limited(
            QUERY_IN_FLIGHT, (_pending(h) for h in handles)
        )
        query_seconds = time.perf_counter() - query_started
        sent: dict[str, float] = {}

        async def approve(handle: Any, requests: list[ApprovalRequest]) -> None:
            [request] = requests
            sent[handle.id] = time.time()
            await handle.signal(
                AgentTaskWorkflow.submit_decision,
                {"request_id": request.request_id, "version": request.version, "decision": "approve",
                 "principal": APPROVER},
            )  # fmt: skip

        cpu_queried, cache_queried = cpu_seconds(worker.pid), await asyncio.to_thread(cache_counts, port)
        server_queried = group_cpu_seconds(server.proc.pid)
        await gather_limited(IN_FLIGHT, (approve(h, p) for h, p in zip(handles, pending, strict=True)))
        results: list[TaskResult] = await gather_limited(4 * IN_FLIGHT, (h.result() for h in handles))
        done = time.time()
        _, final_peak = rss_mb(worker.pid)
        cpu_done, cache_done = cpu_seconds(worker.pid), await asyncio.to_thread(cache_counts, port)
        server_done = group_cpu_seconds(server.proc.pid)
    finally:
        await worker.stop()
    phases = {r.phase for r in results}
    assert phases == {TaskPhase.COMPLETED}, phases
    committed = _commits(config.business_db, "SELECT task_id, committed_at FROM business_records")
    with sqlite3.connect(config.business_db) as conn:
        rows, keys = conn.execute("SELECT count(*), count(DISTINCT task_id) FROM business_records").fetchone()
    figures = _figures(sent, committed, done)
    figures.update(
        {
            "parked": n,
            "park_per_s": n / park_seconds,
            "idle_rss_mb": idle_rss,
            "parked_rss_mb": parked_rss,
            "peak_rss_mb": max(parked_peak, final_peak),
            "db_mb": db_parked,
            "db_growth_mb": db_parked - db_before,
            "query_all_s": query_seconds,
            "cpu_ms_park": (cpu_parked - cpu_start) * 1000 / n,
            "cpu_ms_approve": (cpu_done - cpu_queried) * 1000 / n,
            "server_cpu_ms_approve": (server_done - server_queried) * 1000 / n,
            "rpcs_approve": (cache_done[2].total() - cache_queried[2].total()) / n,
            "heartbeats_approve": (
                cache_done[2]["RecordActivityTaskHeartbeat"] - cache_queried[2]["RecordActivityTaskHeartbeat"]
            )
            / n,
            "cache_size": float(cache if cache is not None else config.workflow_cache_size),
            "cache_hits_approve": cache_done[0] - cache_queried[0],
            "cache_misses_approve": cache_done[1] - cache_queried[1],
            "rows": rows,
            "duplicates": rows - keys,
            "missing": n - keys,
        }
    )
    return figures


async def park_bare(server: Any, tmp: Path, n: int, workflow: str = "BareApproval") -> dict[str, float]:
    """The baseline of ``park_ours``: ``n`` ``workflow`` workflows (``BareApproval``, or
    ``BareApprovalAnswer``, which also gives the model the receipt) on a bare worker process."""
    queue = f"bare-{uuid.uuid4().hex[:8]}"
    worker = await spawn_bare_worker(server.address, queue, tmp / "bare", tmp / "bare.log")
    try:
        ids = [f"bare-park-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
        cpu_start = cpu_seconds(worker.pid)
        started = time.perf_counter()
        handles = await gather_limited(
            IN_FLIGHT, (server.client.start_workflow(workflow, id=i, task_queue=queue) for i in ids)
        )
        await gather_limited(IN_FLIGHT, (h.query("parked") for h in handles))
        park_seconds = time.perf_counter() - started
        parked_rss, _ = rss_mb(worker.pid)
        cpu_parked, server_parked = cpu_seconds(worker.pid), group_cpu_seconds(server.proc.pid)
        sent: dict[str, float] = {}

        async def approve(handle: Any) -> None:
            sent[handle.id] = time.time()
            await handle.signal("approve")

        await gather_limited(IN_FLIGHT, (approve(h) for h in handles))
        await gather_limited(4 * IN_FLIGHT, (h.result() for h in handles))
        done = time.time()
        cpu_done, server_done = cpu_seconds(worker.pid), group_cpu_seconds(server.proc.pid)
    finally:
        await worker.stop()
    committed = _commits(tmp / "bare" / "bare.db", "SELECT task_id, committed_at FROM rows")
    figures = _figures(sent, committed, done)
    figures.update(
        {
            "park_per_s": n / park_seconds,
            "parked_rss_mb": parked_rss,
            "rows": len(committed),
            "cpu_ms_park": (cpu_parked - cpu_start) * 1000 / n,
            "cpu_ms_approve": (cpu_done - cpu_parked) * 1000 / n,
            "server_cpu_ms_approve": (server_done - server_parked) * 1000 / n,
        }
    )
    return figures


async def run(quick: bool = False, tasks: int | None = None, bare_tasks: int | None = None) -> Section:
    n = tasks or (10 if quick else DEFAULT_TASKS)
    bare_n = min(n, bare_tasks or n)
    section = Section("parked", f"3. Parked approvals ({n} tasks)", load=load())
    began = time.perf_counter()
    with scratch("parked") as tmp:
        async with dev_server(tmp / "server") as server:
            if quick:  # side by side: only checks that it works
                ours, bare = await asyncio.gather(
                    park_ours(server, tmp, n, section), park_bare(server, tmp, bare_n)
                )
            else:
                ours = await park_ours(server, tmp, n, section)
                bare = await park_bare(server, tmp, bare_n)
    section.seconds = time.perf_counter() - began
    section.headers = ["measure", "agent-worker", "bare Temporal", "ratio"]
    section.rows = [
        row("tasks parked per s (start to all waiting)", ours["park_per_s"], bare["park_per_s"], 1),
        row("worker RSS with all parked, MB", ours["parked_rss_mb"], bare["parked_rss_mb"]),
        row("approvals committed per s", ours["commits_per_s"], bare["commits_per_s"], 1),
        row("tasks completed per s after approval", ours["completions_per_s"], bare["completions_per_s"], 1),
        row("approval-to-commit p50, ms", ours["p50_ms"], bare["p50_ms"]),
        row("approval-to-commit p95, ms", ours["p95_ms"], bare["p95_ms"]),
        row("worker CPU ms per task, parking", ours["cpu_ms_park"], bare["cpu_ms_park"]),
        row("worker CPU ms per task, approval to completion", ours["cpu_ms_approve"], bare["cpu_ms_approve"]),
        row(
            "dev server CPU ms per task, approval to completion",
            ours["server_cpu_ms_approve"],
            bare["server_cpu_ms_approve"],
        ),
        [
            "worker requests to the server per approval (of them heartbeats)",
            f"{ours['rpcs_approve']:.1f} ({ours['heartbeats_approve']:.1f})",
            "",
            "",
        ],
        ["rows written / duplicates", f"{ours['rows']} / {ours['duplicates']}", f"{bare['rows']} / 0", ""],
    ]
    section.targets += [
        Target(
            "3a (parked memory)",
            f"worker RSS under {RSS_TARGET_MB} MB with {n} tasks parked",
            f"{ours['parked_rss_mb']:.0f} MB (peak {ours['peak_rss_mb']:.0f} MB, "
            f"idle {ours['idle_rss_mb']:.0f} MB)",
            ours["peak_rss_mb"] < RSS_TARGET_MB,
        ),
        Target(
            "3b (no duplicates)",
            "every approved task writes once",
            f"{ours['rows']} rows for {n} tasks, {ours['duplicates']} duplicates, {ours['missing']} missing",
            ours["duplicates"] == 0 and ours["missing"] == 0,
        ),
    ]
    section.notes += [
        f"Server database (SQLite with WAL and shm files) with the {n} tasks parked: {ours['db_mb']:.1f} MB "
        f"({ours['db_growth_mb']:.1f} MB for the tasks, {ours['db_growth_mb'] * 1000 / n:.1f} KB each). "
        f"Querying `pending_approvals` of all {n}: {ours['query_all_s']:.1f} s.",
        *(
            [
                f"The bare baseline parked {bare_n} workflows, not {n} (`--bare-tasks`): its rates, "
                "latencies and CPU per task compare; its RSS is for that smaller count."
            ]
            if bare_n != n
            else []
        ),
        f"Workflow-task cache misses while approving: {ours['cache_misses_approve']:.0f} of "
        f"{ours['cache_hits_approve'] + ours['cache_misses_approve']:.0f}, on a cache of "
        f"{ours['cache_size']:.0f} workflows (section 10 measures CPU per approval with every task cached).",
        "One agent-worker process with the product's defaults (64 activity and workflow-task slots, the "
        f"workflow cache at its default budget); the client keeps {IN_FLIGHT} starts or signals, or "
        f"{QUERY_IN_FLIGHT} queries, in flight. Latency is from the signal "
        "leaving the client to the business row's commit time (same clock).",
    ]
    section.figures = {k: float(v) for k, v in ours.items()}
    section.figures.update({f"bare_{k}": float(v) for k, v in bare.items()})
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument("--tasks", type=int, help=f"tasks to park (default {DEFAULT_TASKS})")
    parser.add_argument(
        "--bare-tasks", type=int, help="park fewer bare workflows than tasks (default: as many)"
    )
    parser.add_argument("--out", help="file for the report (default bench/results/parked.md)")
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.tasks, args.bare_tasks), args.quick, args.out)


if __name__ == "__main__":
    main()
