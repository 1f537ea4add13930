"""16. What an ignored decision costs: a stale decision sent as the signal ``submit_decision``
against the same decision sent as the update ``decide`` (refused by its validator), in one run.

One worker process (the product's defaults), one dev server. For each way, a fresh ``bench-approval``
task waits for its approval; N decisions for its request with a stale version are sent, 40 in
flight, and the figures are taken once the task has dealt with all of them (a signal: when
``status.ignored_count`` reaches N; an update: when its call is answered):

- the worker's and the server's CPU per ignored decision (``/proc``, user + system);
- what the decisions leave in the task's history (events, bytes), and the CPU a replay of that
  history spends on them (an in-process ``Replayer`` with the worker's runner, against the replay of
  a task that received none): every cache miss and every worker restart pays it again;
- of a signal's replay, the share of the workflow's own checks (decoding the payload, validating it
  as an ``ApprovalDecision``, ``why_not``): the signal history is replayed again with the handler
  recording each as ignored with a fixed reason (the same events and state, none of the checks).
  What remains is the SDK's part per signal (its activation, payload conversion and handler task)
  and the recording, which a signal handler cannot avoid.

A refused update is never written to history, so its cost ends with its answer; a signal is an event
for the life of the run. The ratios are of the same run; absolute figures depend on the machine's load.

Run: ``python -m bench.ignored_input [--quick] [--decisions N]`` (writes ``bench/results/ignored_input.md``
unless ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_worker.schemas.payloads import DATA_CONVERTER
from agent_worker.schemas.tasks import TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client, WorkflowHandle, WorkflowHistory, WorkflowUpdateFailedError
from temporalio.worker import Replayer

from agent_worker.plugin import WORKFLOWS, workflow_runner
from bench.agents import APPROVER, approval_task
from bench.common import (
    REPO,
    Section,
    bench_config,
    cpu_seconds,
    dev_server,
    gather_limited,
    load,
    machine,
    ratio,
    scratch,
    spawn_agent_worker,
)

DECISIONS = 3_000
QUICK_DECISIONS = 300
IN_FLIGHT = 40  # as tests/test_bounds.py's flood
STALE = "sha256:" + "0" * 64
WAYS = ("signal", "update")
SIGNAL = "submit_decision"
OUT = REPO / "bench" / "results" / "ignored_input.md"


async def _waiting(client: Client, queue: str, label: str) -> tuple[WorkflowHandle[Any, TaskResult], Any]:
    """A fresh task waiting for its one approval, and its request."""
    handle = await client.start_workflow(
        AgentTaskWorkflow.run,
        approval_task(label),
        id=f"ignored-{label}-{uuid.uuid4().hex[:6]}",
        task_queue=queue,
        result_type=TaskResult,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pending = await handle.query(AgentTaskWorkflow.pending_approvals)
        if pending:
            return handle, pending[0]
        await asyncio.sleep(0.2)
    raise RuntimeError(f"task {handle.id} never asked for approval")


async def _flood(handle: WorkflowHandle[Any, TaskResult], request: Any, way: str, n: int) -> None:
    """``n`` stale decisions for ``request`` sent ``way``; returns once the task dealt with all."""
    stale = {"request_id": request.request_id, "version": STALE, "decision": "approve", "principal": APPROVER}

    async def send() -> None:
        if way == "signal":
            await handle.signal(AgentTaskWorkflow.submit_decision, stale)
            return
        try:
            await handle.execute_update(AgentTaskWorkflow.decide, stale)
        except WorkflowUpdateFailedError:
            return  # refused by the validator: what is measured
        raise AssertionError("a stale decision was accepted")

    await gather_limited(IN_FLIGHT, (send() for _ in range(n)))
    if way == "signal":
        deadline = time.monotonic() + 600
        while (await handle.query(AgentTaskWorkflow.status)).ignored_count < n:
            assert time.monotonic() < deadline, "the worker did not get through the signals"
            await asyncio.sleep(0.2)


async def _replay_cpu(history: WorkflowHistory, rounds: int = 5) -> float:
    """Median CPU seconds of replaying ``history`` in this process, in the worker's runner."""
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER, workflow_runner=workflow_runner())
    await replayer.replay_workflow(history)  # the first replay imports and builds what all share
    spent = []
    for _ in range(rounds):
        began = time.process_time()
        await replayer.replay_workflow(history)
        spent.append(time.process_time() - began)
    return sorted(spent)[len(spent) // 2]


async def _history(handle: WorkflowHandle[Any, TaskResult]) -> tuple[WorkflowHistory, int, int]:
    history = await handle.fetch_history()
    return history, len(history.events), sum(e.ByteSize() for e in history.events)


def _record_unchecked(self: Any, raw: Any) -> None:
    """The decision signal's handler without its checks: each signal recorded as ignored."""
    self.approvals.ignore("stale version", "signal")


@contextlib.contextmanager
def _handler(replacement: Any) -> Iterator[None]:
    """``submit_decision``'s handler replaced, for this process's replays, within the block."""
    definition = getattr(AgentTaskWorkflow, "__temporal_workflow_definition").signals[SIGNAL]
    original = definition.fn
    object.__setattr__(definition, "fn", replacement)  # a frozen dataclass of the SDK's
    try:
        yield
    finally:
        object.__setattr__(definition, "fn", original)


async def measure(tmp: Path, n: int) -> dict[str, dict[str, float]]:
    """Per way (and ``none``, a task that received nothing): CPU per decision and history figures."""
    figures: dict[str, dict[str, float]] = {}
    async with dev_server(tmp / "server") as server:
        config = bench_config(tmp / "data")
        worker = await spawn_agent_worker(server.address, config, tmp / "worker.log")
        try:
            quiet, _ = await _waiting(server.client, config.task_queue, "none")
            history, events, size = await _history(quiet)
            figures["none"] = {"replay_cpu_s": await _replay_cpu(history), "events": events, "bytes": size}
            for way in WAYS:
                handle, request = await _waiting(server.client, config.task_queue, way)
                await asyncio.sleep(1)  # the task's own start settles before counting
                worker_before, server_before = cpu_seconds(worker.pid), cpu_seconds(server.proc.pid)
                began = time.perf_counter()
                await _flood(handle, request, way, n)
                seconds = time.perf_counter() - began
                worker_cpu = cpu_seconds(worker.pid) - worker_before
                server_cpu = cpu_seconds(server.proc.pid) - server_before
                history, events, size = await _history(handle)
                cpu = await _replay_cpu(history)
                figures[way] = {
                    "worker_ms": worker_cpu * 1000 / n,
                    "server_ms": server_cpu * 1000 / n,
                    "per_s": n / seconds,
                    "replay_cpu_s": cpu,
                    "replay_ms": max(0.0, cpu - figures["none"]["replay_cpu_s"]) * 1000 / n,
                    "events": events - figures["none"]["events"],
                    "bytes": size - figures["none"]["bytes"],
                }
                if way == "signal":
                    with _handler(_record_unchecked):
                        unchecked = await _replay_cpu(history)
                    figures[way]["checks_ms"] = max(0.0, cpu - unchecked) * 1000 / n
                print(f"{way}: {figures[way]}", flush=True)
        finally:
            await worker.stop()
    return figures


async def run(quick: bool = False, decisions: int | None = None) -> Section:
    n = decisions or (QUICK_DECISIONS if quick else DECISIONS)
    section = Section(
        "ignored_input", f"16. CPU per ignored decision: signal against update, {n:,} each", load=load()
    )
    began = time.perf_counter()
    with scratch("ignored-input") as tmp:
        figures = await measure(tmp, n)
    section.seconds = time.perf_counter() - began
    signal, update = figures["signal"], figures["update"]
    section.headers = ["sent as", "worker CPU ms per ignored decision", "server CPU ms", "worker + server",
                       "against the signal", "history events added", "history bytes added",
                       "replay CPU ms per decision (every cache miss)",
                       "decisions dealt with per s"]  # fmt: skip
    section.rows = [
        [way, f"{f['worker_ms']:.3f}", f"{f['server_ms']:.3f}", f"{f['worker_ms'] + f['server_ms']:.3f}",
         ratio(f["worker_ms"] + f["server_ms"], signal["worker_ms"] + signal["server_ms"]),
         f"{f['events']:.0f}", f"{f['bytes']:,.0f}", f"{f['replay_ms']:.3f}", f"{f['per_s']:.0f}"]
        for way, f in (("signal `submit_decision`", signal),
                       ("update `decide`, refused by its validator", update))
    ]  # fmt: skip
    section.notes.append(
        f"Worker CPU, update against signal: {ratio(update['worker_ms'], signal['worker_ms'])} while "
        f"sent; with one replay of the history afterwards (a cache miss or a restart): "
        f"{ratio(update['worker_ms'] + update['replay_ms'], signal['worker_ms'] + signal['replay_ms'])}. "
        f"Replay of a task that received none: {figures['none']['replay_cpu_s'] * 1000:.0f} ms."
    )
    section.notes.append(
        f"Of a signal's replay CPU ({signal['replay_ms']:.3f} ms), the workflow's own checks (decode, "
        f"validate, `why_not`) are {signal['checks_ms']:.3f} ms "
        f"({signal['checks_ms'] / signal['replay_ms']:.0%}); the rest is the SDK's activation, payload "
        "conversion and handler task, and recording the decision as ignored."
        if signal["replay_ms"]
        else "The signal replay's cost was below what this run can tell apart."
    )
    section.figures = {f"{way}_{k}": v for way, f in figures.items() for k, v in f.items()}
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_DECISIONS} decisions each way")
    parser.add_argument("--decisions", type=int, help=f"decisions each way (default {DECISIONS:,})")
    args = parser.parse_args()
    section = asyncio.run(run(args.quick, args.decisions))
    section.measured_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = f"{machine()}\n\n{section.markdown()}\nReproduce: `.venv/bin/python -m bench.ignored_input`.\n"
    print(text)
    if not args.quick:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)


if __name__ == "__main__":
    main()
