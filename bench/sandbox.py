"""6. Sandbox: ``sandbox.exec`` against raw ``docker exec``, and one container per task against one per
command. The measuring is ``bench.sandbox_exec`` (see its docstring); this wraps it as a section.

Needs a Docker daemon and the sandbox image (``make sandbox-image``); without them the section says
why it was skipped.

Run: ``python -m bench.sandbox [--quick] [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import time

from agent_worker.activities.sandbox.docker import docker_available
from agent_worker.schemas.config import WorkerConfig

from bench.common import Section, load


async def run(quick: bool = False, rounds: int | None = None) -> Section:
    rounds = rounds or (3 if quick else 30)
    section = Section("sandbox", "6. Sandbox: sandbox.exec vs raw docker exec", load=load())
    began = time.perf_counter()
    image = WorkerConfig().docker_image
    problem = docker_available(image)
    if problem is not None:
        section.skipped = f"{problem} (start dockerd and run `make sandbox-image`)"
        return section
    from bench import sandbox_exec

    report = await sandbox_exec.main(rounds)
    section.seconds = time.perf_counter() - began
    table = [line for line in report.splitlines() if line.startswith("| ") and not set(line) <= set("|-: ")]
    section.headers = [c.strip() for c in table[0].strip("|").split("|")]
    section.rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[1:]]
    by_way = {row[0]: row for row in section.rows}
    section.figures = {
        "docker_exec_ms": float(by_way["docker exec (CLI)"][1]),
        "ours_ms": float(by_way["sandbox.exec (ours)"][1]),
        "ours_ratio": float(by_way["sandbox.exec (ours)"][3].rstrip("x")),
        "container_per_command_ratio": float(by_way["container per command"][3].rstrip("x")),
    }
    section.notes.append(
        f"Image `{image}`, {rounds} round trips each in one warm container (`bench/sandbox_exec.py`). "
        "`sandbox.exec` is timed as its activity body, without Temporal around it; benchmark 1 has the "
        "cost of a whole step."
    )
    if not quick:
        sandbox_exec.RESULTS.parent.mkdir(parents=True, exist_ok=True)
        sandbox_exec.RESULTS.write_text(report)
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run that only checks it works")
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.rounds), args.quick)


if __name__ == "__main__":
    main()
