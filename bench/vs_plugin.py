"""2. Against the official plugin: the same scripted agent (the same model responses: ``count to N``,
one shell command per turn) through ``temporalio-openai-agents`` and through agent-worker, on the same
dev server: wall time, and history bytes per turn as turns grow.

The plugin runs in its own virtual environment (``bench.plugin_venv`` says why and how), in a
process with its own worker (``bench.plugin_side``); agent-worker's worker runs in this process.
Each side times start to result of its own workflows. Rounds alternate between the two sides.

Run: ``python -m bench.vs_plugin [--quick] [--turns 10,20,40,80] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from importlib import metadata
from typing import Any

from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from bench import plugin_venv
from bench.agents import counting_task
from bench.common import (
    REPO,
    Section,
    Target,
    agent_worker,
    bench_config,
    dev_server,
    history_breakdown,
    load,
    median,
    ratio,
    run_sizes,
    scratch,
    top_sizes,
)

TIME_TARGET = 1.0
BYTES_TARGET = 10.0
FLAT_TOLERANCE = 1.25
# Issue 43, item 5: what one more turn adds to a history at 40 turns (bytes per added turn, 40 -> 80),
# at most this share of what it adds to the plugin's.
ADDED_TURN_TARGET = 0.25


async def _plugin_round(python: str, address: str, turns: list[int]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OPENAI_API_KEY")}
    env["PYTHONPATH"] = str(REPO)
    proc = await asyncio.create_subprocess_exec(
        python,
        "-m",
        "bench.plugin_side",
        "--address",
        address,
        "--turns",
        ",".join(map(str, turns)),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the plugin side failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    return json.loads(out.decode().strip().splitlines()[-1])


async def _ours(client: Any, queue: str, n: int) -> dict[str, Any]:
    task_id = f"ours-{n}-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    handle = await client.start_workflow(
        AgentTaskWorkflow.run, counting_task(n), id=task_id, task_queue=queue, result_type=TaskResult
    )
    result = await handle.result()
    seconds = time.perf_counter() - started
    assert result.phase is TaskPhase.COMPLETED and result.final_output == f"counted to {n}", result
    sizes = await run_sizes(client, task_id)
    return {
        "turns": n,
        "seconds": seconds,
        "events": sum(s.events for s in sizes),
        "bytes": sum(s.bytes for s in sizes),
        "runs": len(sizes),
        "workflow_id": task_id,
    }


async def run(quick: bool = False, turns: list[int] | None = None, rounds: int | None = None) -> Section:
    turns = turns or ([3, 6] if quick else [10, 20, 40, 80])
    rounds = rounds or (1 if quick else 2)
    focus = 40 if 40 in turns else turns[-1]
    section = Section("vs_plugin", "2. Against the official plugin (temporalio-openai-agents)", load=load())
    began = time.perf_counter()
    python = str(await asyncio.to_thread(plugin_venv.ensure))
    theirs: dict[int, list[dict[str, Any]]] = {}
    ours: dict[int, list[dict[str, Any]]] = {}
    with scratch("plugin") as tmp:
        async with dev_server(tmp / "server") as server:
            config = bench_config(tmp / "data")
            async with agent_worker(server.client, config):
                await _ours(server.client, config.task_queue, 1)  # warm
                versions: dict[str, str] = {}
                for _ in range(rounds):
                    plugin = await _plugin_round(python, server.address, turns)
                    versions = plugin["versions"]
                    for r in plugin["runs"]:
                        assert r["answer"] == f"counted to {r['turns']}", r
                        theirs.setdefault(r["turns"], []).append(r)
                    for n in turns:
                        ours.setdefault(n, []).append(await _ours(server.client, config.task_queue, n))
                ours_breakdown = await history_breakdown(
                    server.client.get_workflow_handle(ours[focus][-1]["workflow_id"])
                )
                their_breakdown = await history_breakdown(
                    server.client.get_workflow_handle(theirs[focus][-1]["workflow_id"])
                )
    section.seconds = time.perf_counter() - began

    def fig(runs: dict[int, list[dict[str, Any]]], n: int, key: str) -> float:
        return median(r[key] for r in runs[n])

    section.headers = [
        "turns",
        "plugin s",
        "ours s",
        "time ours/plugin",
        "plugin bytes/turn",
        "ours bytes/turn",
        "bytes plugin/ours",
        "plugin events",
        "ours events",
    ]
    for n in turns:
        t_plugin, t_ours = fig(theirs, n, "seconds"), fig(ours, n, "seconds")
        b_plugin, b_ours = fig(theirs, n, "bytes") / n, fig(ours, n, "bytes") / n
        section.rows.append(
            [
                str(n),
                f"{t_plugin:.2f}",
                f"{t_ours:.2f}",
                ratio(t_ours, t_plugin),
                f"{b_plugin:.0f}",
                f"{b_ours:.0f}",
                ratio(b_plugin, b_ours),
                f"{fig(theirs, n, 'events'):.0f}",
                f"{fig(ours, n, 'events'):.0f}",
            ]
        )

    def marginal(runs: dict[int, list[dict[str, Any]]], a: int, b: int) -> float:
        return (fig(runs, b, "bytes") - fig(runs, a, "bytes")) / (b - a)

    first, last = (turns[0], turns[1]), (turns[-2], turns[-1])
    ours_growth = marginal(ours, *last) / marginal(ours, *first)
    their_growth = marginal(theirs, *last) / marginal(theirs, *first)
    t_ours, t_plugin = fig(ours, focus, "seconds"), fig(theirs, focus, "seconds")
    b_ours, b_plugin = fig(ours, focus, "bytes") / focus, fig(theirs, focus, "bytes") / focus
    section.targets += [
        Target(
            "2a (wall time vs plugin)",
            f"ours no slower at {focus} turns",
            f"{ratio(t_ours, t_plugin)} the plugin's time",
            t_ours <= t_plugin * TIME_TARGET,
        ),
        Target(
            "2b (history bytes per turn)",
            f"ours at least {BYTES_TARGET:.0f}x smaller at {focus} turns",
            f"plugin {b_plugin:.0f} B/turn, ours {b_ours:.0f} B/turn: {ratio(b_plugin, b_ours)} smaller",
            b_plugin / b_ours >= BYTES_TARGET,
        ),
        Target(
            "2c (flat as turns grow)",
            f"ours: bytes per added turn at {last[0]}-{last[1]} turns within {FLAT_TOLERANCE:.2f}x of "
            f"{first[0]}-{first[1]}",
            f"ours {ours_growth:.2f}x, plugin {their_growth:.2f}x",
            ours_growth <= FLAT_TOLERANCE,
        ),
        Target(
            "2d (bytes per added turn vs plugin; issue 43, item 5)",
            f"ours at most {ADDED_TURN_TARGET:.2f}x the plugin's, per turn added at {last[0]}-{last[1]}"
            " turns",
            f"plugin {marginal(theirs, *last):.0f} B, ours {marginal(ours, *last):.0f} B per added turn: "
            f"{ratio(marginal(ours, *last), marginal(theirs, *last))}",
            marginal(ours, *last) <= marginal(theirs, *last) * ADDED_TURN_TARGET,
        ),
    ]
    section.notes += [
        f"Plugin: {', '.join(f'{k} {v}' for k, v in versions.items())}, in its own venv ({python}); "
        f"agent-worker: openai-agents {metadata.version('openai-agents')} in the project venv. Medians of "
        f"{rounds} round(s); each side's time is start to result, measured by its own client.",
        f"Bytes per added turn ({first[0]}->{first[1]} vs {last[0]}->{last[1]} turns): plugin "
        f"{marginal(theirs, *first):.0f} -> {marginal(theirs, *last):.0f}, "
        f"ours {marginal(ours, *first):.0f} -> {marginal(ours, *last):.0f}.",
        f"Where agent-worker's history bytes go ({focus} turns): {top_sizes(ours_breakdown)}.",
        f"Where the plugin's go ({focus} turns): {top_sizes(their_breakdown)}.",
    ]
    section.figures = {
        "turns": focus,
        "plugin_seconds": t_plugin,
        "ours_seconds": t_ours,
        "plugin_bytes_per_turn": b_plugin,
        "ours_bytes_per_turn": b_ours,
        "ours_growth": ours_growth,
        "plugin_growth": their_growth,
        "ours_bytes_per_added_turn_first": marginal(ours, *first),
        "ours_bytes_per_added_turn_last": marginal(ours, *last),
        "plugin_bytes_per_added_turn_last": marginal(theirs, *last),
        "last_from_turns": last[0],
        "last_to_turns": last[1],
    }
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument("--turns", help="comma-separated turn counts (at least two)")
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    from bench.report import standalone

    turns = [int(t) for t in args.turns.split(",")] if args.turns else None
    standalone(run(args.quick, turns, args.rounds), args.quick)


if __name__ == "__main__":
    main()
