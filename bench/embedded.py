"""8. Embedded default: the dev server on SQLite with WAL (``journal_mode=wal, synchronous=normal``, as
``agent-worker dev`` runs it) against SQLite's default file mode (rollback journal, full sync).

The same three workloads on each, one server after the other, in-process workers:
- ``BareNoop``: K activities in a row (the cost of one activity round trip);
- C ``BareNoop`` workflows of 10 activities at once (write throughput);
- one agent-worker task, ``count to T`` (``bench-counter``).

Run: ``python -m bench.embedded [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from pathlib import Path

from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from bench.agents import counting_task
from bench.common import Section, agent_worker, bare_worker, bench_config, dev_server, load, ratio, scratch


async def _measure(directory: Path, wal: bool, k: int, c: int, t: int) -> dict[str, float]:
    async with dev_server(directory / "server", wal=wal) as server:
        config = bench_config(directory / "data")
        queue = f"bare-{uuid.uuid4().hex[:8]}"
        async with agent_worker(server.client, config), bare_worker(server.client, queue, directory / "bare"):
            client = server.client
            await client.execute_workflow("BareNoop", 1, id=f"warm-{queue}", task_queue=queue)
            started = time.perf_counter()
            await client.execute_workflow("BareNoop", k, id=f"seq-{queue}", task_queue=queue)
            sequential = time.perf_counter() - started
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    client.execute_workflow("BareNoop", 10, id=f"par-{i}-{queue}", task_queue=queue)
                    for i in range(c)
                )
            )
            parallel = time.perf_counter() - started
            started = time.perf_counter()
            result = await client.execute_workflow(
                AgentTaskWorkflow.run,
                counting_task(t),
                id=f"task-{queue}",
                task_queue=config.task_queue,
                result_type=TaskResult,
            )
            task = time.perf_counter() - started
            assert result.phase is TaskPhase.COMPLETED, result.reason
    return {"ms_per_activity": sequential * 1000 / k, "activities_per_s": c * 10 / parallel, "task_s": task}


async def run(quick: bool = False) -> Section:
    k, c, t = (10, 5, 3) if quick else (100, 30, 20)
    section = Section(
        "embedded", "8. Embedded default: dev server with WAL vs default file mode", load=load()
    )
    began = time.perf_counter()
    with scratch("embedded") as tmp:
        wal = await _measure(tmp / "wal", True, k, c, t)
        plain = await _measure(tmp / "default", False, k, c, t)
    section.seconds = time.perf_counter() - began
    section.headers = ["measure", "WAL (ours)", "default file mode", "default / WAL"]
    section.rows = [
        [f"ms per activity, {k} in a row", f"{wal['ms_per_activity']:.0f}", f"{plain['ms_per_activity']:.0f}",
         ratio(plain["ms_per_activity"], wal["ms_per_activity"])],
        [f"activities/s, {c} workflows x 10 at once", f"{wal['activities_per_s']:.0f}",
         f"{plain['activities_per_s']:.0f}", ratio(wal["activities_per_s"], plain["activities_per_s"])],
        [f"agent task `count to {t}`, s", f"{wal['task_s']:.1f}", f"{plain['task_s']:.1f}",
         ratio(plain["task_s"], wal["task_s"])],
    ]  # fmt: skip
    section.notes.append(
        "Each column has a fresh server and database in the same temporary directory's file system. "
        "Ratios read as how many times slower (for activities/s: how many times less) the default mode is."
    )
    section.figures = {
        "wal_ms_per_activity": wal["ms_per_activity"],
        "default_ms_per_activity": plain["ms_per_activity"],
        "wal_activities_per_s": wal["activities_per_s"],
        "default_activities_per_s": plain["activities_per_s"],
        "wal_task_s": wal["task_s"],
        "default_task_s": plain["task_s"],
    }
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick), args.quick)


if __name__ == "__main__":
    main()
