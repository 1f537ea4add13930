"""``agent-worker policy simulate``: how long a candidate policy takes over recorded histories (issue 40,
item 5; acceptance 5: 50 recorded histories in under 30 s here).

Every figure is the wall time of the console script in a fresh process (interpreter start and
imports included), as a person or a CI job runs it, with ``examples/policies/raise-limit.yaml`` as
the candidate; medians of the rounds, taken in turns. Sources:

- **cluster**: the runs of 50 real tasks of the recorder agent (scripted model), run here on a dev
  server of the benchmark's own (values allowed, asked and approved, and denied by their policy), read
  through visibility (``--query "TaskQueue = ..." --since 1d``): the list, then each history, fetched
  one by one. After each round the number of runs on the queue is checked unchanged (nothing started).
- **files, 50 / 500**: the three committed recorder histories (``tests/histories``) and copies of
  them with other arguments (``tests.helpers.history_variants``), read from disk.
- **files, committed**: every history under ``tests/histories`` (all kinds of tasks).

Run: ``python -m bench.policy_simulate [--quick] [--rounds 3]``. Writes ``bench/results/policy_simulate.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, Section, Target, agent_worker, bench_config, dev_server, load, median, scratch

CANDIDATE = REPO / "examples" / "policies" / "raise-limit.yaml"
HISTORIES = REPO / "tests" / "histories"
# The committed recorder runs: (file, value proposed, the tool).
RECORDED = {
    "50": "test_an_argument_condition_allows_a_small_write_without_asking.json",
    "5000": "test_an_argument_condition_sends_a_large_write_for_approval.json",
    "secret-42": "test_a_deny_rules_reason_reaches_the_model.json",
}
RULES = [
    {
        "tool": "record_value",
        "when": 'args.value.startsWith("secret-")',
        "decision": "deny",
        "reason": "secret",
    },
    {"tool": "record_value", "when": "int(args.value) <= 1000", "decision": "allow"},
    {"tool": "record_value", "decision": "require_approval", "approvers": ["finance-lead"]},
]
ROUNDS = 3
MAX_SECONDS = 30.0
TASKS = 50


def console_script() -> str:
    """The ``agent-worker`` console script of this virtualenv."""
    return str(Path(sys.executable).with_name("agent-worker"))


def variants(directory: Path, count: int) -> Path:
    """``count`` history files: the committed recorder runs and copies with other values, each value
    of the class its run was decided in (so each copy's recorded outcome still fits its policy)."""
    from tests.helpers.history_variants import with_arguments

    directory.mkdir(parents=True, exist_ok=True)
    bases = {value: json.loads((HISTORIES / name).read_text()) for value, name in RECORDED.items()}
    for n in range(count):
        value = list(RECORDED)[n % 3]
        other = {"50": str(n % 1000 + 1), "5000": str(1001 + n * 997), "secret-42": f"secret-{n}"}[value]
        (directory / f"h{n:04d}.json").write_text(
            json.dumps(with_arguments(bases[value], "record_value", {"value": other}))
        )
    return directory


def simulate(args: list[str], address: str) -> tuple[float, float, dict[str, Any]]:
    """One run of ``agent-worker --address A policy simulate --policy CANDIDATE ARGS --json``: its
    wall seconds, its CPU seconds (user and system), and its JSON."""
    argv = [console_script(), "--address", address, "policy", "simulate", "--policy", str(CANDIDATE)]
    argv += [*args, "--json"]
    started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    seconds, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr[-2000:]}")
    return seconds, after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime, json.loads(done.stdout)


async def record_tasks(address: str, data_dir: Path, count: int) -> str:
    """Run ``count`` recorder tasks on a worker of this process; the task queue they ran on."""
    from agent_worker.client import AgentWorkerClient
    from tests.helpers.support import connect

    client = await connect(address)
    config = bench_config(data_dir, agents=["tests.helpers.agents:registrations"])
    tasks = AgentWorkerClient(client, config.task_queue)
    # Of every six: four small values (allowed), one large (asked, then approved), one secret (denied).
    values = [
        f"secret-{n}" if n % 6 == 5 else str(2000 + n) if n % 6 == 0 else str(n * 37 % 1000 + 1)
        for n in range(count)
    ]
    async with agent_worker(client, config):
        ids = []
        for n, value in enumerate(values):
            spec = {"agent": "recorder", "prompt": f"record: {value}", "policy": {"rules": RULES}}
            ids.append((await tasks.start(spec, f"sim-{n}")).task_id)
        for task_id, value in zip(ids, values, strict=True):
            if not value.startswith("secret-") and int(value) > 1000:
                request = await tasks.next_request(task_id)
                await tasks.decide(task_id, request.request_id, "approve", principal="finance-lead")
            await asyncio.wait_for(tasks.result(task_id), 120)
    return config.task_queue


async def run(quick: bool, rounds: int | None = None) -> Section:
    rounds = rounds or (1 if quick else ROUNDS)
    began, started_load = time.perf_counter(), load()
    count = 6 if quick else TASKS
    figures: dict[str, float] = {}
    rows: list[list[str]] = []
    with scratch("simulate") as tmp:
        small, large = variants(tmp / "50", 10 if quick else 50), variants(tmp / "500", 20 if quick else 500)
        async with dev_server(tmp / "server") as server:
            queue = await record_tasks(server.address, tmp / "data", count)
            query = f"TaskQueue = '{queue}'"
            sources = {
                f"cluster, {count} real runs": ["--query", query, "--since", "1d"],
                f"files, {len(list(small.glob('*.json')))} histories": [str(small)],
                f"files, {len(list(large.glob('*.json')))} histories": [str(large)],
                "files, committed (tests/histories)": [str(HISTORIES)],
            }
            walls: dict[str, list[float]] = {name: [] for name in sources}
            cpus: dict[str, list[float]] = {name: [] for name in sources}
            reports: dict[str, dict[str, Any]] = {}
            for _ in range(rounds):
                for name, args in sources.items():
                    seconds, cpu, reports[name] = await asyncio.to_thread(simulate, args, server.address)
                    walls[name].append(seconds)
                    cpus[name].append(cpu)
                    runs = (await server.client.count_workflows(query)).count
                    assert runs == count, f"the simulation changed the runs on the queue: {runs} != {count}"
    for name, report in reports.items():
        summary, wall = report["summary"], median(walls[name])
        rows.append(
            [
                name,
                str(summary["runs"]),
                str(summary["actions"]),
                str(summary["changed"]),
                str(summary["inconsistent"]),
                f"{wall:.2f}",
                f"{median(cpus[name]):.2f}",
                f"{report['elapsed_seconds']:.2f}",
            ]
        )
        figures[name] = wall
        figures[f"{name} (CPU)"] = median(cpus[name])
    cluster = next(iter(reports))
    section = Section(
        "policy_simulate", "Policy simulate: a candidate over recorded histories", load=started_load
    )
    section.headers = [
        "source",
        "runs",
        "actions",
        "changed",
        "inconsistent",
        "wall s (median)",
        "CPU s (median)",
        "in-process wall s",
    ]
    section.rows = rows
    section.targets = [
        Target(
            f"{count} recorded histories from the cluster",
            f"under {MAX_SECONDS:g} s",
            f"{figures[cluster]:.2f} s wall, {figures[f'{cluster} (CPU)']:.2f} s CPU",
            figures[cluster] < MAX_SECONDS,
        )
    ]
    section.notes = [
        f"Medians of {rounds} rounds. Wall and CPU (user + system) of the console script in a fresh "
        "process, interpreter start and imports included; in-process wall: the command's own measure, "
        "policy file to report (connection and fetching included), of the last round. On a loaded "
        "machine wall time follows the load; CPU time does not. Runs on the queue were counted after "
        f"every round: {count}, unchanged."
    ]
    section.figures = {**figures, "rounds": rounds}
    section.seconds = time.perf_counter() - began
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a few tasks and files, one round, no file written"
    )
    parser.add_argument("--rounds", type=int, help=f"rounds (default {ROUNDS})")
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.rounds), args.quick)


if __name__ == "__main__":
    main()
