"""10. Worker CPU per approval: with every task in the workflow cache (warm), against bare Temporal
doing the same, and with more active tasks than the cache holds.

Runs of section 3's flow (``bench.parked``: park ``bench-approval`` tasks, then approve them
all at once, as fast as the client sends the signals) on one dev server, one worker process each:

- warm: ``WARM_TASKS`` tasks on the product's default cache, which holds them all;
- bare: as many ``BareApproval`` workflows on the baseline worker (wait for a signal, insert a row),
  and as many ``BareApprovalAnswer`` (then give the model the receipt: bare doing what our task does);
- over-full: ``--active-tasks`` tasks (default ``DEFAULT_ACTIVE``) on a cache that holds fewer. The
  issue's case is 3,000 active tasks on the default cache (294 workflows; 882 and 428 before),
  about 11 minutes here (``bench/results/approval_cpu-3000.md``). By default this runs fewer tasks
  with the cache cut in the same proportion (``AGENT_WORKER_MAX_CACHED_WORKFLOWS``). That is harsher
  than the issue's size, not the same: the 64 signals in flight do not shrink with it (measured
  2026-12-02 at commit 7f52432: 5.33x warm at 600 tasks on 86, 2.12x at 3,000 on 428). At
  ``--active-tasks 3000`` the cache is the default's size;
- over-full again, each task asking ``continue_as_new_before_wait: 0`` (``IN_RUN``: its wait stays in
  the run that led to it, as every task's did before ``short-wait-by-default``; by default a task
  waits in a short run), and once more with the SDK's full sandbox (``FULL_SANDBOX``).

CPU per approval is the worker's user+system CPU from the first approval signal to the last task's
result, over the tasks. The worker's cache hits and misses in that phase (``/metrics``) show which
regime each run was in (the SDK counts a miss only for a task its sticky queue sends back).

Run: ``python -m bench.approval_cpu [--quick] [--active-tasks N] [--warm-tasks N] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import time

from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.tasks import DEFAULT_EVENTS_BEFORE_WAIT

from bench import parked
from bench.common import Section, dev_server, load, ratio, scratch

WARM_TASKS = 200
DEFAULT_ACTIVE = 600
ISSUE_ACTIVE = 3000  # the issue's measure: 3,000 active tasks on the default cache
DEFAULT_CACHE = WorkerConfig().workflow_cache_size
QUICK = (5, 12)  # warm, over-full
FULL_SANDBOX = {"AGENT_WORKER_WORKFLOW_SANDBOX": "true", "AGENT_WORKER_WORKFLOW_PASSTHROUGH": "false"}
# The over-full run again with tasks that wait for a person in the run that led to the wait (the
# default before ``short-wait-by-default``, which begins each wait in a short run).
IN_RUN = {"continue_as_new_before_wait": 0}


def cold_cache(active: int) -> int:
    """The cache for ``active`` tasks that they outnumber as 3,000 outnumber the default cache."""
    return max(2, round(active * DEFAULT_CACHE / ISSUE_ACTIVE))


def _hit_rate(figures: dict[str, float]) -> str:
    lookups = figures["cache_hits_approve"] + figures["cache_misses_approve"]
    if not lookups:
        return "n/a"
    misses = figures["cache_misses_approve"]
    return f"{misses:.0f} of {lookups:.0f} ({misses / lookups:.0%})"


async def run(quick: bool = False, active: int | None = None, warm: int | None = None) -> Section:
    warm_n = warm or (QUICK[0] if quick else WARM_TASKS)
    active_n = active or (QUICK[1] if quick else DEFAULT_ACTIVE)
    cache = cold_cache(active_n)
    section = Section(
        "approval_cpu", f"10. Worker CPU per approval: warm, bare, {active_n} active tasks", load=load()
    )
    began = time.perf_counter()
    scratchpad = Section("approval_cpu", "")  # parked's progress notes, not wanted here
    with scratch("approval-cpu") as tmp:
        for sub in ("warm", "bare", "answer", "cold", "in_run", "sandboxed"):
            (tmp / sub).mkdir()
        async with dev_server(tmp / "server") as server:
            ours = await parked.park_ours(server, tmp / "warm", warm_n, scratchpad)
            bare = await parked.park_bare(server, tmp / "bare", warm_n)
            answer = await parked.park_bare(server, tmp / "answer", warm_n, "BareApprovalAnswer")
            cold = await parked.park_ours(server, tmp / "cold", active_n, scratchpad, cache=cache)
            in_run = await parked.park_ours(
                server, tmp / "in_run", active_n, scratchpad, cache=cache, spec=IN_RUN
            )
            # The same over-full run with our workflows in the SDK's full sandbox: our packages
            # imported again for every workflow instance, as before ``workflow_passthrough``.
            sandboxed = await parked.park_ours(
                server, tmp / "sandboxed", active_n, scratchpad, cache=cache, worker_env=FULL_SANDBOX
            )
    section.seconds = time.perf_counter() - began
    for name, figures, n in (
        ("warm", ours, warm_n),
        ("over-full", cold, active_n),
        ("over-full, wait in its run", in_run, active_n),
        ("over-full, full sandbox", sandboxed, active_n),
    ):
        assert figures["duplicates"] == 0 and figures["missing"] == 0, (name, figures)
        assert figures["rows"] == n, (name, figures)
    section.headers = [
        "run",
        "tasks",
        "workflow cache size",
        "worker CPU ms per approval",
        "dev server CPU ms per approval",
        "against agent-worker warm",
        "sticky cache misses (SDK metric), approving",
        "approvals committed per s",
    ]

    def line(label: str, n: int, cache_size: str, figures: dict[str, float], misses: str) -> list[str]:
        return [
            label,
            str(n),
            cache_size,
            f"{figures['cpu_ms_approve']:.1f}",
            f"{figures['server_cpu_ms_approve']:.1f}",
            ratio(figures["cpu_ms_approve"], ours["cpu_ms_approve"]),
            misses,
            f"{figures['commits_per_s']:.1f}",
        ]

    section.rows = [
        line("agent-worker, warm", warm_n, f"{ours['cache_size']:.0f}", ours, _hit_rate(ours)),
        line("bare Temporal", warm_n, "SDK default", bare, ""),
        line(
            "bare Temporal, with the model's answer (`BareApprovalAnswer`: what our task does after the "
            "write)",
            warm_n,
            "SDK default",
            answer,
            "",
        ),
        line("agent-worker, over-full cache", active_n, f"{cold['cache_size']:.0f}", cold, _hit_rate(cold)),
        line(
            "agent-worker, over-full cache, each task waiting in the run that led to its wait "
            "(`continue_as_new_before_wait: 0`, the default before `short-wait-by-default`)",
            active_n,
            f"{in_run['cache_size']:.0f}",
            in_run,
            _hit_rate(in_run),
        ),
        line(
            "agent-worker, over-full cache, full sandbox (`workflow_sandbox` on, `workflow_passthrough` off)",
            active_n,
            f"{sandboxed['cache_size']:.0f}",
            sandboxed,
            _hit_rate(sandboxed),
        ),
    ]
    scaled = (
        "the product's default cache"
        if cache == DEFAULT_CACHE
        else f"a cache of {cache} (`AGENT_WORKER_MAX_CACHED_WORKFLOWS`: the default {DEFAULT_CACHE} "
        f"scaled by {active_n}/{ISSUE_ACTIVE}: harsher than {ISSUE_ACTIVE:,} on the default, since the "
        f"{parked.IN_FLIGHT} signals in flight stay; `--active-tasks 3000` runs the issue's size on the "
        "default)"
    )
    section.notes += [
        f"Agent-worker against bare, warm: {ratio(ours['cpu_ms_approve'], answer['cpu_ms_approve'])} the "
        "CPU per approval of bare doing the same (the write, then the model's answer to its receipt: "
        "one `Runner` call of the same scripted model, as our task's last turn), "
        f"{ratio(ours['cpu_ms_approve'], bare['cpu_ms_approve'])} that of bare doing the write alone (the "
        "baseline the issue's 7x was measured against). Over-full against warm: "
        f"{ratio(cold['cpu_ms_approve'], ours['cpu_ms_approve'])}.",
        "Waiting in a short run (the default since `short-wait-by-default`: an unset "
        f"`TaskSpec.continue_as_new_before_wait` is {DEFAULT_EVENTS_BEFORE_WAIT}): each task continues "
        "as new before it waits for its approver, so a replay after the cache let it go reads a run of "
        "a few events. Over-full with the wait in the run that led to it (`0`): "
        f"{ratio(in_run['cpu_ms_approve'], ours['cpu_ms_approve'])} warm "
        f"({ratio(cold['cpu_ms_approve'], in_run['cpu_ms_approve'])} of it by default); what parking "
        f"costs by default: {cold['cpu_ms_park']:.1f} ms of worker CPU per task, against "
        f"{in_run['cpu_ms_park']:.1f} with the wait in its run.",
        "Our workflows outside the workflow sandbox (`workflow_sandbox` off, the default): the "
        f"over-full run at {ratio(cold['cpu_ms_approve'], sandboxed['cpu_ms_approve'])} the CPU per "
        "approval of the same run in the SDK's full sandbox, which imports our packages again for "
        "every workflow instance a cache miss builds.",
        f"The warm run parks {warm_n} tasks on the default cache ({DEFAULT_CACHE} workflows); the "
        f"over-full run parks {active_n} on {scaled}. Each run: one worker process, the client keeps "
        f"{parked.IN_FLIGHT} signals in flight; CPU from the first signal to the last result. "
        "A cache miss replays the task's history from the server before its workflow task runs.",
        f"Section 3 approves {parked.DEFAULT_TASKS} tasks on the default cache by default: "
        + (
            "more than it holds, so its CPU per approval is of the over-full kind, not warm."
            if parked.DEFAULT_TASKS > DEFAULT_CACHE
            else "the cache holds them all, so its CPU per approval is of the warm kind."
        ),
    ]
    section.figures = {
        "warm_tasks": warm_n,
        "active_tasks": active_n,
        "warm_cache": ours["cache_size"],
        "cold_cache": cold["cache_size"],
        "ours_cpu_ms_approve": ours["cpu_ms_approve"],
        "bare_cpu_ms_approve": bare["cpu_ms_approve"],
        "bare_answer_cpu_ms_approve": answer["cpu_ms_approve"],
        "cold_cpu_ms_approve": cold["cpu_ms_approve"],
        "sandboxed_cpu_ms_approve": sandboxed["cpu_ms_approve"],
        "in_run_cpu_ms_approve": in_run["cpu_ms_approve"],
        "in_run_misses_approve": in_run["cache_misses_approve"],
        "in_run_cpu_ms_park": in_run["cpu_ms_park"],
        "cold_cpu_ms_park": cold["cpu_ms_park"],
        "sandboxed_misses_approve": sandboxed["cache_misses_approve"],
        "ours_misses_approve": ours["cache_misses_approve"],
        "cold_misses_approve": cold["cache_misses_approve"],
        "cold_hits_approve": cold["cache_hits_approve"],
        "ours_commits_per_s": ours["commits_per_s"],
        "bare_commits_per_s": bare["commits_per_s"],
        "cold_commits_per_s": cold["commits_per_s"],
    }
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument(
        "--active-tasks", type=int, help=f"tasks of the over-full run (default {DEFAULT_ACTIVE})"
    )
    parser.add_argument("--warm-tasks", type=int, help=f"tasks of the warm runs (default {WARM_TASKS})")
    parser.add_argument("--out", help="file for the report (default bench/results/approval_cpu.md)")
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.active_tasks, args.warm_tasks), args.quick, args.out)


if __name__ == "__main__":
    main()
