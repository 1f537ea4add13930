"""What the workflow sandbox costs a replay, and where: a measurement, not a change to the worker.

A cache miss (or a query on an evicted task) makes the SDK build a new workflow instance and replay
the task's history in it. This replays one committed history (the example task, approved through
the Temporal CLI) ``--replays`` times in each of these, interleaved round by round:

- ``sandboxed``: the SDK's default ``SandboxedWorkflowRunner``: every instance re-imports our
  workflow modules inside its sandbox;
- ``passthrough``: the same sandbox with our own packages passed through
  (``SandboxRestrictions.default.with_passthrough_modules(...)``): imported once, shared by every
  instance, so no longer re-imported but no longer isolated per instance either;
- ``worker, sandbox on``: the worker's runner with ``workflow_sandbox`` on
  (``agent_worker.worker.workflow_runner(sandboxed=True)``): our workflow code passed through
  (``WORKFLOW_CODE``; our models and helpers are passed through where workflow code imports them),
  with payload contexts answered without entering the sandbox and its code strings compiled once
  (``activities.sdk_shims.AgentWorkflowRunner``);
- ``worker``: the worker's runner as it runs by default: our workflows outside the sandbox;
- ``unsandboxed``: ``UnsandboxedWorkflowRunner``, the floor (no sandbox at all).

It also counts the sandbox's ``exec()`` calls by purpose (the SDK runs a code string in the
sandbox for every activation and, through ``_CommandAwareDataConverter._get_current_dc``, for every
payload sequence it decodes or encodes) and times them, and measures a replay with those strings
compiled once instead of on every call (a patch of the SDK's instance's ``_run_code`` in this process
only), which is what an upstream fix would save.

Run: ``python -m bench.sandbox_passthrough [--replays N] [--rounds K]`` (prints the figures; writes
``bench/results/sandbox_passthrough.md`` unless ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import temporalio.workflow
from agent_worker.activities.sdk_shims import sdk_instance_class
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agent_worker.worker import workflow_runner
from bench.common import REPO, load, machine

HISTORY = REPO / "tests" / "histories" / "test_approval_by_temporal_cli_completes_with_evidence.json"
IDS = REPO / "tests" / "histories" / "workflow_ids.json"
OUT = REPO / "bench" / "results" / "sandbox_passthrough.md"
# Our packages the workflow code imports (workflows/ itself, and what it imports under
# imports_passed_through or directly).
OURS = (
    "agent_worker.workflows",
    "agent_worker.schemas",
    "agent_worker.activities",
    "agent_worker.telemetry",
    "agent_worker.security",
    "agent_worker",
)
VALIDATION_RUN_ID = "sandbox-validate-run_id"  # the SDK's run id for its validation instance
DEFAULT_REPLAYS = 20
DEFAULT_ROUNDS = 3


def runners() -> dict[str, WorkflowRunner]:
    """The runners compared, by name."""
    passthrough = SandboxRestrictions.default.with_passthrough_modules(*OURS)
    return {
        "sandboxed": SandboxedWorkflowRunner(),
        "passthrough": SandboxedWorkflowRunner(restrictions=passthrough),
        "worker, sandbox on": workflow_runner(sandboxed=True),
        "worker": workflow_runner(),
        "unsandboxed": UnsandboxedWorkflowRunner(),
    }


def history() -> WorkflowHistory:
    workflow_id = json.loads(IDS.read_text())[HISTORY.stem]
    return WorkflowHistory.from_json(workflow_id, json.loads(HISTORY.read_text()))


async def replay_ms(runner: WorkflowRunner, replays: int) -> list[float]:
    """Milliseconds per replay of the history, each on a new instance (a new Replayer run)."""
    replayer = Replayer(
        workflows=[AgentTaskWorkflow], data_converter=pydantic_data_converter, workflow_runner=runner
    )
    events = history()
    times = []
    for _ in range(replays):
        started = time.perf_counter()
        result = await replayer.replay_workflow(events, raise_on_replay_failure=False)
        times.append((time.perf_counter() - started) * 1000)
        if result.replay_failure is not None:
            raise RuntimeError(f"the history did not replay: {result.replay_failure}")
    return times


class ExecTally:
    """Counts and times the sandbox's ``_run_code`` calls by purpose, across threads."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)
        self.lock = threading.Lock()

    def add(self, purpose: str, seconds: float) -> None:
        with self.lock:
            self.calls[purpose] += 1
            self.seconds[purpose] += seconds


def _purpose(code: str) -> str:
    line = code.splitlines()[1] if "\n" in code else code
    for name in ("get_serialization_context", "get_external_store_context", "activate"):
        if name in line:
            return name
    return "create instance (imports; validation + replayed)"


@contextlib.contextmanager
def tallied(tally: ExecTally, compile_once: bool = False) -> Iterator[None]:
    """Wrap the SDK's instance's ``_run_code`` to tally each call; with ``compile_once``, run each code
    string from a code object compiled on its first use (what an upstream fix would do)."""
    instance_class = sdk_instance_class
    original = instance_class._run_code
    compiled: dict[str, Any] = {}

    def run_code(self: Any, code: str, **extra_globals: Any) -> None:
        started = time.perf_counter()
        try:
            if not compile_once:
                return original(self, code, **extra_globals)
            code_object = compiled.get(code)
            if code_object is None:
                code_object = compiled[code] = compile(code, "<sandbox>", "exec")
            for key, value in extra_globals.items():
                self.globals_and_locals[key] = value
            try:
                temporalio.workflow.unsafe._set_in_sandbox(True)
                self._current_thread_id = threading.get_ident()
                exec(code_object, self.globals_and_locals, self.globals_and_locals)
            finally:
                temporalio.workflow.unsafe._set_in_sandbox(False)
                self._current_thread_id = None
                for key in extra_globals:
                    self.globals_and_locals.pop(key, None)
        finally:
            tally.add(_purpose(code), time.perf_counter() - started)

    instance_class._run_code = run_code  # type: ignore[method-assign]
    try:
        yield
    finally:
        instance_class._run_code = original  # type: ignore[method-assign]


@contextlib.contextmanager
def validation_timed(seconds: list[float]) -> Iterator[None]:
    """Collect the seconds spent creating the SDK's validation instances: a ``Replayer`` builds one
    throwaway instance per ``replay_workflow`` call to check the workflow class, which a worker does
    once at start, so a live cache miss does not pay it."""
    instance_class = sdk_instance_class
    original = instance_class._create_instance

    def create_instance(self: Any) -> None:
        started = time.perf_counter()
        try:
            original(self)
        finally:
            if self.instance_details.info.run_id == VALIDATION_RUN_ID:
                seconds.append(time.perf_counter() - started)

    instance_class._create_instance = create_instance  # type: ignore[method-assign]
    try:
        yield
    finally:
        instance_class._create_instance = original  # type: ignore[method-assign]


def compile_us(code: str, n: int = 2000) -> float:
    """Microseconds to compile ``code`` once (what every exec of a string pays)."""
    started = time.perf_counter()
    for _ in range(n):
        compile(code, "<sandbox>", "exec")
    return (time.perf_counter() - started) * 1e6 / n


SERIALIZATION_CODE = (
    "with __temporal_importer.applied():\n"
    "  __temporal_context = __temporal_in_sandbox.get_serialization_context(__temporal_command_info)\n"
)


async def measure(replays: int, rounds: int) -> dict[str, Any]:
    """Every figure of the report, as a dict."""
    chosen = runners()
    for runner in chosen.values():  # warm: imports, bytecode, pydantic schemas
        await replay_ms(runner, 2)
    per_round: dict[str, list[float]] = defaultdict(list)
    validation: dict[str, list[float]] = defaultdict(list)
    for _ in range(rounds):
        for name, runner in chosen.items():
            with validation_timed(validation[name]):
                per_round[name].append(statistics.median(await replay_ms(runner, replays)))
    tally = ExecTally()
    with tallied(tally):
        tallied_ms = statistics.median(await replay_ms(chosen["sandboxed"], replays))
    once: list[float] = []
    plain: list[float] = []
    for _ in range(rounds):
        with tallied(ExecTally(), compile_once=True):
            once.append(statistics.median(await replay_ms(chosen["sandboxed"], replays)))
        with tallied(ExecTally()):
            plain.append(statistics.median(await replay_ms(chosen["sandboxed"], replays)))
    medians = {name: statistics.median(values) for name, values in per_round.items()}
    return {
        "medians": medians,
        "validation_ms": {
            name: statistics.median(validation[name]) * 1000 if validation[name] else 0.0 for name in chosen
        },
        "rounds": dict(per_round),
        "calls": {k: v / replays for k, v in tally.calls.items()},
        "exec_ms": {k: v * 1000 / replays for k, v in tally.seconds.items()},
        "tallied_ms": tallied_ms,
        "compile_us": compile_us(SERIALIZATION_CODE),
        "compile_once_ms": statistics.median(once),
        "compile_each_ms": statistics.median(plain),
        "events": len(history().events),
    }


def report(figures: dict[str, Any], replays: int, rounds: int) -> str:
    m = figures["medians"]
    calls, exec_ms = figures["calls"], figures["exec_ms"]
    saving = figures["compile_each_ms"] - figures["compile_once_ms"]
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}; {load()}.",
        "",
        "## Workflow sandbox cost per replay",
        "",
        f"History: `{HISTORY.relative_to(REPO)}` ({figures['events']} events). Median ms per replay, "
        f"each on a new instance; {replays} replays per round, {rounds} rounds interleaved "
        "(runner by runner), median of the rounds' medians.",
        "",
        "| runner | ms per replay | against sandboxed | of it, the validation instance | "
        "replay less validation (a live cache miss) | against sandboxed | rounds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    v = figures["validation_ms"]
    live = {name: m[name] - v[name] for name in m}
    for name in runners():
        rounds_text = ", ".join(f"{x:.1f}" for x in figures["rounds"][name])
        lines.append(
            f"| {name} | {m[name]:.1f} | {m[name] / m['sandboxed']:.2f}x | {v[name]:.1f} | "
            f"{live[name]:.1f} | {live[name] / live['sandboxed']:.2f}x | {rounds_text} |"
        )
    lines += [
        "",
        "A `Replayer` builds a throwaway validation instance of the workflow class for every "
        "`replay_workflow` call (run id `sandbox-validate-run_id`); a worker builds it once at start, "
        "so a live cache miss pays the replay less that instance's creation.",
        "",
        f"`passthrough` passes `{', '.join(OURS)}` through the sandbox "
        "(`SandboxRestrictions.default.with_passthrough_modules`); `worker, sandbox on` is the worker's "
        "runner with `workflow_sandbox` on (`agent_worker.worker.workflow_runner(sandboxed=True)`): our "
        "workflow code passed through (`WORKFLOW_CODE`), with payload contexts answered without "
        "entering the sandbox and its code strings compiled once (`AgentWorkflowRunner`); `worker` is "
        "the same runner as a worker runs it by default, our workflows outside the sandbox. "
        "`sandboxed` imports the workflow code afresh for each "
        "instance (the SDK's default; our models and helpers pass through where imported).",
        "",
        "## The sandbox's exec() calls per replay (sandboxed runner)",
        "",
        "| purpose | calls per replay | ms per replay |",
        "| --- | ---: | ---: |",
    ]
    for purpose in sorted(calls, key=lambda p: -calls[p]):
        lines.append(f"| {purpose} | {calls[purpose]:.0f} | {exec_ms[purpose]:.1f} |")
    total_calls = sum(calls.values())
    lines += [
        f"| all | {total_calls:.0f} | {sum(exec_ms.values()):.1f} of {figures['tallied_ms']:.1f} |",
        "",
        f"Compiling the serialization-context string once costs {figures['compile_us']:.1f} µs; "
        f"the SDK compiles it on every call, "
        f"{calls.get('get_serialization_context', 0):.0f} times per replay "
        f"({calls.get('get_serialization_context', 0) * figures['compile_us'] / 1000:.1f} ms).",
        "",
        f"With every code string compiled once (the SDK instance's `_run_code` patched): "
        f"{figures['compile_once_ms']:.1f} ms per replay against {figures['compile_each_ms']:.1f} ms "
        f"({saving:.1f} ms, {saving / figures['compile_each_ms'] * 100:.0f}%), both with the tally's "
        "wrapper.",
        "",
        "Reproduce: `.venv/bin/python -m bench.sandbox_passthrough` "
        f"(`--replays {replays} --rounds {rounds}`).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=DEFAULT_REPLAYS, help="replays per runner per round")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="interleaved rounds")
    parser.add_argument("--quick", action="store_true", help="2 replays, 1 round, no file written")
    parser.add_argument("--out", type=Path, default=OUT, help="the report's file")
    args = parser.parse_args()
    replays, rounds = (2, 1) if args.quick else (args.replays, args.rounds)
    text = report(asyncio.run(measure(replays, rounds)), replays, rounds)
    print(text)
    if not args.quick:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
