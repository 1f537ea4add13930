"""The light client: what ``import agent_worker.client`` and ``agent-worker status --help`` cost a
process that only starts and decides tasks, against ``import temporalio.client`` (issue 43, item 2).

Each figure comes from fresh interpreters, run in turns so that a burst of load on the machine hits
both sides alike: ``python -X importtime -c "import M"`` for ``M`` in ``temporalio.client`` (the
baseline: a client cannot do with less), ``agent_worker.client`` and ``cli.main`` (the
``agent-worker`` command's module). From each run's import-time report come the number of modules
imported (its lines, interpreter start-up included on both sides) and the import statement's cumulative
time (the top-level lines of ``M`` and its parent packages, in microseconds). The wall
time of ``agent-worker status --help`` (the console script, interpreter start included) is measured
the same way, against ``python -c pass`` (the interpreter alone). A warm-up run of each is dropped
(it writes the bytecode caches); the table gives medians. Each run also checks that the import left
none of the worker's heavy modules loaded (``tests/test_light_client.py`` lists them).

Targets (issue 43, acceptance 2): ``agent_worker.client`` at most 1.5x ``temporalio.client``'s
module count and time, in one run; ``agent-worker status --help`` under 1 s here.

Run: ``python -m bench.import_time [--quick] [--rounds 7]``. Writes ``bench/results/import_time.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import REPO, Section, Target, load, median, ratio
from tests.test_light_client import HEAVY

BASELINE = "temporalio.client"
CLIENT = "agent_worker.client"
CLI = "agent_worker.cli.main"
ROUNDS = 7
MAX_MODULE_RATIO = 1.5
MAX_TIME_RATIO = 1.5
MAX_HELP_SECONDS = 1.0
# One line of ``-X importtime``: "import time: <self us> | <cumulative us> | <indent><module>".
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$")
# Printed after the import: the heavy modules it left loaded (none, when the client is light).
LEFT_LOADED = "import sys; print(','.join(sorted(m for m in {heavy!r} if m in sys.modules)))"


@dataclass
class Import:
    """One fresh interpreter's import of a module."""

    modules: int
    micros: int
    heavy: list[str]


def _env() -> dict[str, str]:
    """The environment of every run: this checkout first on the path, no bytecode writes skipped."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure_import(module: str) -> Import:
    """Import ``module`` in a fresh interpreter under ``-X importtime``: modules, time, heavy left."""
    code = f"import {module}; " + LEFT_LOADED.format(heavy=sorted(HEAVY))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=120,
        check=True,
    )
    lines = [m for m in map(IMPORT_LINE.match, done.stderr.splitlines()) if m]
    # The import statement's cost: the top-level entries of the module and its parent packages
    # (``import a.b`` imports ``a``, then ``a.b``; each top-level line has a one-space indent).
    chain = {".".join(module.split(".")[: i + 1]) for i in range(module.count(".") + 1)}
    own = sum(int(m.group(2)) for m in lines if m.group(4) in chain and len(m.group(3)) == 1)
    if not own:
        raise RuntimeError(f"no import-time line for {module}: {done.stderr[-500:]}")
    return Import(len(lines), own, [m for m in done.stdout.strip().split(",") if m])


def wall_seconds(argv: list[str]) -> float:
    """Wall time of one run of ``argv`` (a fresh process), which must succeed."""
    began = time.perf_counter()
    subprocess.run(argv, capture_output=True, env=_env(), cwd=REPO, timeout=120, check=True)
    return time.perf_counter() - began


def console_script() -> str:
    """The ``agent-worker`` console script of this virtualenv."""
    return str(Path(sys.executable).with_name("agent-worker"))


def run(quick: bool, rounds: int | None = None) -> Section:
    """Measure ``rounds`` turns (plus a dropped warm-up) and build the section."""
    rounds = rounds or (2 if quick else ROUNDS)
    began, started_load = time.perf_counter(), load()
    imports: dict[str, list[Import]] = {BASELINE: [], CLIENT: [], CLI: []}
    walls: dict[str, list[float]] = {"help": [], "python": []}
    help_argv = [console_script(), "status", "--help"]
    for turn in range(rounds + 1):
        for module in imports:
            measured = measure_import(module)
            if turn:
                imports[module].append(measured)
        help_seconds, python_seconds = wall_seconds(help_argv), wall_seconds([sys.executable, "-c", "pass"])
        if turn:
            walls["help"].append(help_seconds)
            walls["python"].append(python_seconds)
    modules = {m: median(i.modules for i in runs) for m, runs in imports.items()}
    millis = {m: median(i.micros for i in runs) / 1000 for m, runs in imports.items()}
    heavy = sorted(
        {h for runs in imports.values() if runs is not imports[BASELINE] for i in runs for h in i.heavy}
    )
    help_s, python_s = median(walls["help"]), median(walls["python"])
    section = Section("import_time", "Light client: import cost", load=started_load)
    section.headers = ["import", "modules", f"x {BASELINE}", "cumulative ms", f"x {BASELINE}"]
    for module in imports:
        section.rows.append(
            [
                module,
                f"{modules[module]:.0f}",
                ratio(modules[module], modules[BASELINE]),
                f"{millis[module]:.0f}",
                ratio(millis[module], millis[BASELINE]),
            ]
        )
    module_ratio = modules[CLIENT] / modules[BASELINE]
    time_ratio = millis[CLIENT] / millis[BASELINE]
    section.targets = [
        Target(
            "client modules",
            f"<= {MAX_MODULE_RATIO}x {BASELINE}'s",
            f"{module_ratio:.2f}x ({modules[CLIENT]:.0f} / {modules[BASELINE]:.0f})",
            module_ratio <= MAX_MODULE_RATIO,
        ),
        Target(
            "client import time",
            f"<= {MAX_TIME_RATIO}x {BASELINE}'s",
            f"{time_ratio:.2f}x ({millis[CLIENT]:.0f} / {millis[BASELINE]:.0f} ms)",
            time_ratio <= MAX_TIME_RATIO,
        ),
        Target(
            "`agent-worker status --help`",
            f"under {MAX_HELP_SECONDS:g} s",
            f"{help_s:.2f} s (the interpreter alone: {python_s:.2f} s)",
            help_s < MAX_HELP_SECONDS,
        ),
        Target("heavy modules left loaded", "none", ", ".join(heavy) or "none", not heavy),
    ]
    section.notes = [
        f"Medians of {rounds} fresh interpreters each, taken in turns after a dropped warm-up; "
        f"`{CLI}` is the `agent-worker` command's module (every command's parser)."
    ]
    section.figures = {
        "client_modules": modules[CLIENT],
        "baseline_modules": modules[BASELINE],
        "cli_modules": modules[CLI],
        "client_ms": millis[CLIENT],
        "baseline_ms": millis[BASELINE],
        "cli_ms": millis[CLI],
        "module_ratio": module_ratio,
        "time_ratio": time_ratio,
        "status_help_seconds": help_s,
        "python_seconds": python_s,
        "heavy_loaded": len(heavy),
        "rounds": rounds,
    }
    section.seconds = time.perf_counter() - began
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two rounds, no file written")
    parser.add_argument("--rounds", type=int, help=f"fresh interpreters per figure (default {ROUNDS})")
    args = parser.parse_args()
    from bench.report import standalone

    standalone(_as_coroutine(run(args.quick, args.rounds)), args.quick)


async def _as_coroutine(section: Section) -> Section:
    return section


if __name__ == "__main__":
    main()
