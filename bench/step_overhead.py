"""1. Step overhead: one agent step through agent-worker against one bare Temporal activity doing the
same work, on the same server, in the same process.

A step is one model call (the shared script, through the OpenAI Agents SDK ``Runner``) that asks for
one shell command, and that command. agent-worker runs a ``count to N`` task (``bench-counter``): an
``agent.turn`` and a ``sandbox.exec`` per step, with its policy, events and evidence. The baseline
(``bench.bare``) runs one ``bare.step`` activity per step that makes the same model call and runs
the same command in process; the issue's target is against ``BareSplitCount``, which does the same
work as the issue defines its baseline: one activity per model call (``bare.model``) and one per
command (``bare.command``). Per-step time is the difference between an N-step and a 1-step run
divided by N-1, so that start and completion costs fall out; they are reported on their own.

Run: ``python -m bench.step_overhead [--quick] [--steps 30] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from bench.agents import counting_task
from bench.bare import CountInput, CountResult
from bench.common import (
    Section,
    Target,
    activity_counts,
    activity_durations,
    agent_worker,
    bare_worker,
    bench_config,
    dev_server,
    load,
    median,
    ratio,
    run_sizes,
    scratch,
    time_breakdown,
)

TARGET = 1.15


async def _ours(server: Any, queue: str, steps: int) -> tuple[float, str]:
    task_id = f"step-{steps}-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    handle = await server.client.start_workflow(
        AgentTaskWorkflow.run, counting_task(steps), id=task_id, task_queue=queue, result_type=TaskResult
    )
    result = await handle.result()
    elapsed = time.perf_counter() - started
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == f"counted to {steps}", result.final_output
    return elapsed, task_id


async def _split(server: Any, queue: str, steps: int) -> tuple[float, str]:
    return await _bare(server, queue, steps, "BareSplitCount")


async def _bare(server: Any, queue: str, steps: int, workflow: str = "BareCount") -> tuple[float, str]:
    task_id = f"bare-{steps}-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    result = await server.client.execute_workflow(
        workflow,
        CountInput(prompt=f"count to {steps}"),
        id=task_id,
        task_queue=queue,
        result_type=CountResult,
    )
    elapsed = time.perf_counter() - started
    assert result.output == f"counted to {steps}", result.output
    return elapsed, task_id


async def run(quick: bool = False, steps: int | None = None, rounds: int | None = None) -> Section:
    steps = steps or (5 if quick else 30)
    rounds = rounds or (1 if quick else 3)
    section = Section("step_overhead", "1. Step overhead: agent-worker step vs bare activity", load=load())
    began = time.perf_counter()
    with scratch("step") as tmp:
        async with dev_server(tmp / "server") as server:
            config = bench_config(tmp / "data")
            bare_queue = f"bare-{uuid.uuid4().hex[:8]}"
            async with (
                agent_worker(server.client, config),
                bare_worker(server.client, bare_queue, tmp / "bare"),
            ):
                await _ours(server, config.task_queue, 1)  # warm both workers (imports, caches)
                await _bare(server, bare_queue, 1)
                await _split(server, bare_queue, 1)
                times: dict[tuple[str, int], list[float]] = {}
                ids: dict[str, str] = {}
                # Interleaved, so that load from other users of the machine hits both alike.
                for _ in range(rounds):
                    for n in (1, steps):
                        for name, fn, queue in (
                            ("ours", _ours, config.task_queue),
                            ("bare", _bare, bare_queue),
                            ("split", _split, bare_queue),
                        ):
                            elapsed, task_id = await fn(server, queue, n)
                            times.setdefault((name, n), []).append(elapsed)
                            ids[name] = task_id
                ours_acts = await activity_counts(server.client.get_workflow_handle(ids["ours"]))
                ours_time = await time_breakdown(server.client.get_workflow_handle(ids["ours"]))
                bare_time = await time_breakdown(server.client.get_workflow_handle(ids["bare"]))
                split_time = await time_breakdown(server.client.get_workflow_handle(ids["split"]))
                turns = await activity_durations(server.client.get_workflow_handle(ids["ours"]), "agent.turn")
                bare_steps = await activity_durations(
                    server.client.get_workflow_handle(ids["bare"]), "bare.step"
                )
                ours_size = (await run_sizes(server.client, ids["ours"]))[-1]
                bare_size = (await run_sizes(server.client, ids["bare"]))[-1]
                split_size = (await run_sizes(server.client, ids["split"]))[-1]
    section.seconds = time.perf_counter() - began

    def per_step(name: str) -> float:
        return (median(times[(name, steps)]) - median(times[(name, 1)])) / (steps - 1) * 1000

    ours_step, split_step, bare_step = per_step("ours"), per_step("split"), per_step("bare")

    def at(name: str, n: int) -> float:
        return median(times[(name, n)]) * 1000

    section.headers = [
        "measure",
        "agent-worker",
        "bare, 2 activities per step",
        "ratio",
        "bare, 1 activity per step",
        "ratio",
    ]

    def row(label: str, ours: float, split: float, bare: float, fmt: str = "{:.0f}") -> list[str]:
        return [
            label,
            fmt.format(ours),
            fmt.format(split),
            ratio(ours, split),
            fmt.format(bare),
            ratio(ours, bare),
        ]

    section.rows = [
        row("ms per step (marginal)", ours_step, split_step, bare_step),
        row(
            f"ms for a {steps}-step task, start to result",
            at("ours", steps),
            at("split", steps),
            at("bare", steps),
        ),
        row("ms for a 1-step task, start to result", at("ours", 1), at("split", 1), at("bare", 1)),
        row(f"history events ({steps} steps)", ours_size.events, split_size.events, bare_size.events),
        row(f"history bytes ({steps} steps)", ours_size.bytes, split_size.bytes, bare_size.bytes),
    ]
    per_type = ", ".join(
        f"{name} {count}" for name, count in sorted(ours_acts.items(), key=lambda kv: -kv[1])
    )
    section.notes.append(
        f"Medians of {rounds} interleaved round(s). Activities in agent-worker's {steps}-step task: "
        f"{per_type}; the baselines run {steps + 1} `bare.model` and {steps} `bare.command` (the "
        "target's baseline: one activity per model call and one per command), or "
        f"{steps + 1} `bare.step` (both in one)."
    )
    section.notes += [
        f"Where the {steps}-step task's time went, from its history's event times (ms per step; queue = "
        "scheduled to started, run = started to completed):",
        "| span | agent-worker ms/step | bare, 2 per step | bare, 1 per step |",
        "| --- | ---: | ---: | ---: |",
    ]
    spans = set(ours_time) | set(split_time) | set(bare_time)
    for label in sorted(spans, key=lambda k: -ours_time.get(k, (0, 0.0))[1]):
        cells = [
            f"{t[label][1] / steps:.1f}" if label in t else "-" for t in (ours_time, split_time, bare_time)
        ]
        section.notes.append(f"| {label} | {' | '.join(cells)} |")
    edge = max(1, min(5, len(turns) // 3))
    section.notes.append(
        f"`agent.turn` grows with the conversation: its first {edge} turns ran {median(turns[:edge]):.0f} ms "
        f"(median), its last {edge} {median(turns[-edge:]):.0f} ms; `bare.step`, which also carries the "
        f"whole conversation, {median(bare_steps[:edge]):.0f} ms and {median(bare_steps[-edge:]):.0f} ms."
    )
    section.targets.append(
        Target(
            "1 (step overhead)",
            f"at most {TARGET:.2f}x a bare step of one activity per model call and one per command",
            f"{ratio(ours_step, split_step)} ({ratio(ours_step, bare_step)} of one activity doing both)",
            ours_step / split_step <= TARGET if split_step > 0 else None,
        )
    )
    section.figures = {
        "ours_ms_per_step": ours_step,
        "split_ms_per_step": split_step,
        "bare_ms_per_step": bare_step,
        "ratio": ours_step / split_step if split_step else 0.0,
        "ratio_one_activity": ours_step / bare_step if bare_step else 0.0,
        "ours_events": ours_size.events,
        "bare_events": bare_size.events,
        "ours_activities": sum(ours_acts.values()),
        "ours_turns": ours_acts.get("agent.turn", 0),
    }
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.steps, args.rounds), args.quick)


if __name__ == "__main__":
    main()
