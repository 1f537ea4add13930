"""5. Long task: 1,000 turns with continue-as-new. The largest history (events and bytes) of any run,
and the total time against 1,000 bare activities doing the same work.

agent-worker runs ``count to 1000`` (``bench-counter``: a model call and a sandbox command per
turn) and continues as new when the server suggests it (its defaults). The baseline is
``BareCount``: 1,000 ``bare.step`` activities (the same model call and command each), continuing as
new on the same suggestion. Quick mode runs 40 turns on a server that suggests continue-as-new
every 150 events, so that both sides do continue as new.

Run: ``python -m bench.long_task [--quick] [--turns 1000]``.
"""

from __future__ import annotations

import argparse
import time
import uuid

from agent_worker.schemas import tasks
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from bench.agents import counting_task
from bench.bare import CountInput, CountResult
from bench.common import (
    Section,
    agent_worker,
    bare_worker,
    bench_config,
    carried_sizes,
    dev_server,
    history_breakdown,
    load,
    ratio,
    run_sizes,
    scratch,
    top_sizes,
)

QUICK_SERVER = {"limit.historyCount.suggestContinueAsNew": "150"}
INLINE_EVIDENCE = tasks.INLINE_EVIDENCE  # the default for tasks begun since patch lean-evidence


async def run(quick: bool = False, turns: int | None = None) -> Section:
    n = turns or (40 if quick else 1000)
    section = Section("long_task", f"5. Long task ({n} turns, continue-as-new)", load=load())
    began = time.perf_counter()
    with scratch("long") as tmp:
        async with dev_server(tmp / "server", dynamic_config=QUICK_SERVER if quick else None) as server:
            config = bench_config(tmp / "data")
            bare_queue = f"bare-{uuid.uuid4().hex[:8]}"
            async with (
                agent_worker(server.client, config),
                bare_worker(server.client, bare_queue, tmp / "bare"),
            ):
                ours_id, bare_id = f"long-{uuid.uuid4().hex[:6]}", f"bare-long-{uuid.uuid4().hex[:6]}"
                started = time.perf_counter()
                handle = await server.client.start_workflow(
                    AgentTaskWorkflow.run,
                    counting_task(n),
                    id=ours_id,
                    task_queue=config.task_queue,
                    result_type=TaskResult,
                )
                result = await handle.result()
                ours_s = time.perf_counter() - started
                assert result.phase is TaskPhase.COMPLETED and result.final_output == f"counted to {n}", (
                    result
                )
                started = time.perf_counter()
                bare_result = await server.client.execute_workflow(
                    "BareCount", CountInput(prompt=f"count to {n}"), id=bare_id, task_queue=bare_queue,
                    result_type=CountResult,
                )  # fmt: skip
                bare_s = time.perf_counter() - started
                assert bare_result.output == f"counted to {n}", bare_result
                ours_runs, bare_runs = (
                    await run_sizes(server.client, ours_id),
                    await run_sizes(server.client, bare_id),
                )
                carried = await carried_sizes(server.client, ours_id)
                largest = max(ours_runs, key=lambda r: r.bytes)
                breakdown = await history_breakdown(server.client.get_workflow_handle(ours_id))
    section.seconds = time.perf_counter() - began
    ours_big = (max(r.events for r in ours_runs), max(r.bytes for r in ours_runs))
    bare_big = (max(r.events for r in bare_runs), max(r.bytes for r in bare_runs))
    section.headers = ["measure", "agent-worker", "bare Temporal", "ratio"]
    section.rows = [
        ["total time, s", f"{ours_s:.1f}", f"{bare_s:.1f}", ratio(ours_s, bare_s)],
        ["ms per turn", f"{ours_s * 1000 / n:.0f}", f"{bare_s * 1000 / n:.0f}", ratio(ours_s, bare_s)],
        ["runs (continue-as-new + 1)", str(len(ours_runs)), str(len(bare_runs)), ""],
        ["largest run, events", str(ours_big[0]), str(bare_big[0]), ratio(ours_big[0], bare_big[0])],
        ["largest run, bytes", str(ours_big[1]), str(bare_big[1]), ratio(ours_big[1], bare_big[1])],
        ["all runs, bytes", str(sum(r.bytes for r in ours_runs)), str(sum(r.bytes for r in bare_runs)),
         ratio(sum(r.bytes for r in ours_runs), sum(r.bytes for r in bare_runs))],
        ["largest carried state (a run's input), bytes", str(max(carried[1:], default=0)), "", ""],
    ]  # fmt: skip
    section.notes += [
        f"agent-worker's runs (events, bytes): {[(r.events, r.bytes) for r in ours_runs]}; the largest by "
        f"bytes has {largest.events} events. Model calls {result.usage.model_calls}; runs counted by the "
        f"task {result.usage.runs}.",
        f"Where the last run's bytes go: {top_sizes(breakdown)}.",
        f"Input of each run, bytes (after the first, the state continue-as-new carried): {carried}. "
        f"Command records past the newest {INLINE_EVIDENCE} move to the artifact store at each "
        f"continue-as-new, so this stays flat however many turns the task runs.",
        "Continue-as-new "
        + (
            "every 150 events (quick mode's server)."
            if quick
            else "when the dev server suggests it (its defaults)."
        ),
    ]
    section.figures = {
        "turns": n,
        "ours_seconds": ours_s,
        "bare_seconds": bare_s,
        "ours_runs": len(ours_runs),
        "bare_runs": len(bare_runs),
        "ours_max_events": ours_big[0],
        "ours_max_bytes": ours_big[1],
        "bare_max_events": bare_big[0],
        "bare_max_bytes": bare_big[1],
        "ours_all_bytes": sum(r.bytes for r in ours_runs),
        "bare_all_bytes": sum(r.bytes for r in bare_runs),
        "ours_max_carried_bytes": max(carried[1:], default=0),
        "ours_last_carried_bytes": carried[-1] if len(carried) > 1 else 0,
    }
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument("--turns", type=int)
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.turns), args.quick)


if __name__ == "__main__":
    main()
