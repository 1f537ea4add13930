"""``python -m bench``: run the ten benchmarks, print a table, and write ``bench/RESULTS.md`` (with the
figures as JSON beside it, ``bench/RESULTS.json``), headed by issue 21's targets table (``bench.targets``).

``--quick`` runs every benchmark at a size that only proves it works (CI runs it once through
``tests/test_bench_quick.py``), side by side to save time, and writes ``bench/results/quick.md``
unless ``--out`` says where. ``--only step_overhead,parked`` picks benchmarks by key (the report keeps
the other sections from the last one). ``--parked-tasks``, ``--active-tasks`` and ``--long-turns``
set the sizes the default run keeps small enough for about 45 minutes on 2 cores. Worker logs
go to ``bench/results/bench.log``. Exits 1 when a benchmark failed (the report says which and why).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    approval_cpu,
    crash,
    embedded,
    fleet,
    long_task,
    parked,
    round_trips,
    sandbox,
    step_overhead,
    targets,
    vs_plugin,
)
from bench.common import Section, load
from bench.report import LOG, RESULTS, RESULTS_DIR, logs_to, render, write

QUICK_RESULTS = RESULTS_DIR / "quick.md"


def benchmarks(args: argparse.Namespace) -> dict[str, Callable[[], Coroutine[Any, Any, Section]]]:
    """Every benchmark by key, in the issue's order, bound to the command line's sizes."""
    quick = args.quick
    return {
        "step_overhead": lambda: step_overhead.run(quick),
        "vs_plugin": lambda: vs_plugin.run(quick),
        "parked": lambda: parked.run(quick, args.parked_tasks),
        "crash": lambda: crash.run(quick),
        "long_task": lambda: long_task.run(quick, args.long_turns),
        "sandbox": lambda: sandbox.run(quick),
        "fleet": lambda: fleet.run(quick),
        "embedded": lambda: embedded.run(quick),
        "round_trips": lambda: round_trips.run(quick),
        "approval_cpu": lambda: approval_cpu.run(quick, args.active_tasks),
    }


TITLES = {
    "step_overhead": "1. Step overhead",
    "vs_plugin": "2. Against the official plugin",
    "parked": "3. Parked approvals",
    "crash": "4. Crash recovery",
    "long_task": "5. Long task",
    "sandbox": "6. Sandbox",
    "fleet": "7. Fleet",
    "embedded": "8. Embedded default",
    "round_trips": "9. Round trips of the example task",
    "approval_cpu": "10. Worker CPU per approval",
}


async def _one(
    key: str, start: Callable[[], Coroutine[Any, Any, Section]], say: Callable[[str], None]
) -> Section:
    began = time.perf_counter()
    started_load = load()
    measured_at = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    say(f"-- {TITLES[key]}: started ({started_load})")
    try:
        section = await start()
    except Exception as err:  # one broken benchmark must not hide the others' results
        traceback.print_exc()  # into the log
        section = Section(key, TITLES[key], load=started_load, seconds=time.perf_counter() - began)
        section.skipped = f"FAILED: {type(err).__name__}: {str(err)[:500]} (traceback in {LOG.name})"
    section.measured_at = measured_at
    say(section.text())
    return section


async def _run_all(
    chosen: dict[str, Callable[[], Coroutine[Any, Any, Section]]], parallel: bool, say: Callable[[str], None]
) -> list[Section]:
    if parallel:
        return list(await asyncio.gather(*(_one(k, f, say) for k, f in chosen.items())))
    return [await _one(k, f, say) for k, f in chosen.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, side by side: checks they work")
    parser.add_argument("--only", help=f"comma-separated keys: {', '.join(TITLES)}")
    parser.add_argument(
        "--out", type=Path, help="the report (default bench/RESULTS.md; quick: bench/results/quick.md)"
    )
    parser.add_argument("--parked-tasks", type=int, help=f"tasks to park (default {parked.DEFAULT_TASKS})")
    parser.add_argument(
        "--active-tasks",
        type=int,
        help=f"tasks of the over-full-cache approval run (default {approval_cpu.DEFAULT_ACTIVE}, on a cache "
        f"cut in proportion; {approval_cpu.ISSUE_ACTIVE} is the issue's size, on the default cache)",
    )
    parser.add_argument("--long-turns", type=int, help="turns of the long task (default 1000)")
    parser.add_argument(
        "--sequential", action="store_true", help="in quick mode too, one benchmark at a time"
    )
    parser.add_argument("--render", action="store_true", help="only write the report again from its JSON")
    args = parser.parse_args(argv)
    if args.render:
        render(args.out or RESULTS)
        return 0
    chosen = benchmarks(args)
    if args.only:
        unknown = set(args.only.split(",")) - set(chosen)
        if unknown:
            parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(chosen)}")
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    out = args.out or (QUICK_RESULTS if args.quick else RESULTS)
    started, start_load, began = datetime.now(UTC), load(), time.perf_counter()
    with logs_to(LOG) as say:
        say(f"benchmarks: {', '.join(chosen)}; {'quick' if args.quick else 'full size'}; {start_load}")
        sections = asyncio.run(_run_all(chosen, args.quick and not args.sequential, say))
    seconds = time.perf_counter() - began
    command = "python -m bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    previous = out.with_suffix(".json")
    if args.only and previous.exists():
        # Re-ran some benchmarks: keep the others' results from the last report.
        earlier = json.loads(previous.read_text())
        kept = {s["key"]: Section.from_dict(s) for s in earlier["sections"]}
        kept.update({s.key: s for s in sections})
        sections = [kept[k] for k in TITLES if k in kept]
        minutes = earlier["seconds"] / 60
        command += (
            f" (a re-run of these; the other sections are from the run started "
            f"{earlier['measured_at'][:16]}, "
            f"which took {minutes:.1f} minutes for its {len(earlier['sections'])})"
        )
    write(sections, out, quick=args.quick, started=started, seconds=seconds, start_load=start_load,
          command=command.strip())  # fmt: skip
    print(targets.text(sections))
    print(f"\n{len(sections)} benchmarks in {seconds / 60:.1f} min; report: {out}")
    failed = [s.key for s in sections if s.skipped and s.skipped.startswith("FAILED")]
    if failed:
        print(f"failed: {', '.join(failed)} (see {LOG})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
