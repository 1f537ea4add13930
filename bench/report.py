"""The report: ``bench/RESULTS.md`` (date, machine, load, issue 21's targets table (``bench.targets``),
each section's targets, every section's table), a JSON copy of the figures, and the terminal table."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_worker.schemas.config import WorkerConfig
from agent_worker.telemetry import configure_logging

from bench import targets
from bench.common import Section, load, machine

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "RESULTS.md"
RESULTS_DIR = BENCH / "results"
LOG = RESULTS_DIR / "bench.log"
# Hand-written reading of the figures (why targets are missed, what to act on), included in the report.
FINDINGS = BENCH / "findings.md"
# Benchmarks at the full size, run on their own, included in the report below their section:
# parked approvals with 10,000 tasks (``python -m bench.parked --tasks 10000 --out
# bench/results/parked-10000.md``) and CPU per approval with 3,000 active tasks on the default cache
# (``python -m bench.approval_cpu --active-tasks 3000 --out bench/results/approval_cpu-3000.md``).
FULL_SIZE = {"parked": "parked-10000.md", "approval_cpu": "approval_cpu-3000.md"}
# Load average per core above which the figures are called noisy.
BUSY_PER_CORE = 0.5


@contextlib.contextmanager
def logs_to(path: Path) -> Iterator[Callable[[str], None]]:
    """In-process workers log as the product does by default (structlog, info), into ``path``; so do
    the SDK core's warnings (Rust, on stdout and stderr), redirected at the descriptor level.
    Yields a function that prints a line to the real stdout meanwhile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    configure_logging(WorkerConfig())
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}

    def say(line: str) -> None:
        os.write(saved[1], (line + "\n").encode())

    with path.open("a") as log:
        for fd in saved:
            os.dup2(log.fileno(), fd)
        try:
            yield say
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def noise_note(sections: list[Section], start_load: str) -> str:
    """Whether other work on the machine made the figures noisy, judged by the load averages seen."""
    cores = os.cpu_count() or 1
    loads = [float(s.load.split()[1]) for s in sections if s.load.startswith("load ")]
    loads.append(float(start_load.split()[1]))
    worst = max(loads)
    if worst / cores > BUSY_PER_CORE:
        return (
            f"**Noisy:** other work shared this {cores}-core machine (1-minute load up to {worst:.2f} at "
            "section starts; each section's load is given below). Ratios are measured side by side in "
            "the same run, interleaved where the benchmark allows, so they hold better than the "
            "absolute times, but treat differences under ~20% as noise."
        )
    return f"The machine was quiet (1-minute load at most {worst:.2f} on {cores} cores at section starts)."


def markdown(
    sections: list[Section], *, quick: bool, started: datetime, seconds: float, start_load: str, command: str
) -> str:
    lines = [
        "# agent-worker benchmarks",
        "",
        f"Run started {started:%Y-%m-%d %H:%M} UTC on {machine()}.",
        "",
        f"Command: `{command}` ({'quick mode: sizes too small to mean anything' if quick else 'full size'}), "
        f"{seconds / 60:.1f} minutes in all. Load at the start: {start_load}.",
        "Every figure is set against a baseline measured in the same run, on the same dev server, "
        "unless said otherwise.",
        "",
        noise_note(sections, start_load),
        "",
        *targets.markdown(sections),
        "## Targets of each section",
        "",
        "| target | goal | measured | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for section in sections:
        for t in section.targets:
            verdict = {True: "met", False: "**missed**", None: "not measured"}[t.met]
            lines.append(f"| {t.name} | {t.goal} | {t.measured} | {verdict} |")
    lines.append("")
    if FINDINGS.exists() and not quick:
        lines += [FINDINGS.read_text().rstrip(), ""]
    for section in sections:
        lines.append(section.markdown())
        full = RESULTS_DIR / FULL_SIZE.get(section.key, "")
        if not quick and section.key in FULL_SIZE and full.exists():
            # Its own section heading becomes a sub-heading of this one.
            lines += ["", full.read_text().replace("\n## ", "\n### ", 1).rstrip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def write(
    sections: list[Section],
    out: Path,
    *,
    quick: bool,
    started: datetime,
    seconds: float,
    start_load: str,
    command: str,
) -> None:
    """Write the report to ``out`` and the figures to ``out`` with a ``.json`` suffix."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        markdown(
            sections, quick=quick, started=started, seconds=seconds, start_load=start_load, command=command
        )
    )
    data = {
        "measured_at": started.isoformat(),
        "quick": quick,
        "seconds": seconds,
        "start_load": start_load,
        "command": command,
        "machine": machine(),
        "sections": [asdict(s) for s in sections],
    }
    out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")


def render(out: Path) -> None:
    """Write the report at ``out`` again from its JSON (after editing ``findings.md``)."""
    data = json.loads(out.with_suffix(".json").read_text())
    sections = [Section.from_dict(s) for s in data["sections"]]
    out.write_text(
        markdown(
            sections,
            quick=data["quick"],
            started=datetime.fromisoformat(data["measured_at"]),
            seconds=data["seconds"],
            start_load=data.get("start_load", sections[0].load if sections else ""),
            command=data.get("command", "python -m bench"),
        )
    )


def standalone(benchmark: Coroutine[Any, Any, Section], quick: bool, out: str | None = None) -> None:
    """Run one benchmark on its own and print it; at full size, also keep it in ``out`` (default
    ``bench/results/KEY.md``). Worker logs go to ``bench/results/bench.log``."""
    with logs_to(LOG):
        section = asyncio.run(benchmark)
    print(section.text())
    if not quick:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        started = datetime.now(UTC)
        body = f"Measured {started:%Y-%m-%d %H:%M} UTC on {machine()}; {load()} at the end.\n\n"
        (Path(out) if out else RESULTS_DIR / f"{section.key}.md").write_text(body + section.markdown())
