"""Chaos soak: many example tasks through approvals while worker processes are SIGKILLed at random.

    python -m bench.soak [--tasks 200] [--workers 2] [--kill-every 4:12] [--sandbox process|docker]
                         [--seed N] [--out bench/results/soak.md]

Starts its own Temporal dev server (file database, WAL) and ``--workers`` worker processes. Every
task is the monthly-report example: a sandbox computation, then an approval before the write. For
each task a seeded plan picks the human's answer (approve, edit, reject) and, often, a bad decision
first: a stale version or an unauthorized principal, sent as a signal (recorded as ignored) or as an
update (refused before it reaches history). Meanwhile a random worker is SIGKILLed every few seconds
and restarted. At the end it prints tasks by final phase, business writes against approved commits,
duplicates, lost tasks and leftover sandboxes, and exits non-zero on any duplicate, lost task, write
of a rejected task, or missing write.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import platform
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from cli import devserver
from schemas.tasks import TaskResult, TaskStatus
from workflows import AgentTaskWorkflow

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples/monthly_report/task.json"
APPROVER = "finance-lead"
EDITED_TOTAL = "9600.00"
STALE_VERSION = "sha256:" + "0" * 64


@dataclass
class Plan:
    """What the simulated human does with one task."""

    answer: str  # approve | edit | reject
    noise: str | None  # stale | unauthorized | None
    noise_via: str  # signal | update
    via: str  # signal | update


@dataclass
class Outcome:
    task_id: str
    plan: Plan
    phase: str = "lost"
    reason: str | None = None
    update_refusals: int = 0
    ignored: int = 0


@dataclass
class Chaos:
    kills: int = 0
    restarts: int = 0
    log: list[str] = field(default_factory=list)


def make_plan(rng: random.Random) -> Plan:
    answer = rng.choices(["approve", "edit", "reject"], weights=[50, 25, 25])[0]
    noise = rng.choices([None, "stale", "unauthorized"], weights=[50, 25, 25])[0]
    return Plan(answer, noise, rng.choice(["signal", "update"]), rng.choice(["signal", "update"]))


class Fleet:
    """Worker processes of one task queue, killed and restarted on demand."""

    def __init__(self, env: dict[str, str], size: int, logs: Path) -> None:
        self.env, self.logs = env, logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_files: list[Path] = []
        self.started = 0
        for _ in range(size):
            proc, log = self._spawn()
            self.procs.append(proc)
            self.log_files.append(log)

    def ready(self, n: int) -> bool:
        """Whether worker ``n`` is polling (it logged its start)."""
        return self.procs[n].poll() is None and "worker started" in self.log_files[n].read_text()

    def _spawn(self) -> tuple[subprocess.Popen[bytes], Path]:
        self.started += 1
        log = self.logs / f"worker-{self.started}.log"
        with log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "cli.main", "worker"],
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            ), log

    def kill_one(self, rng: random.Random) -> int | None:
        """SIGKILL a random polling worker, as long as another one polls too (a fleet that never
        finishes starting would measure nothing); returns its slot, or None."""
        ready = [n for n in range(len(self.procs)) if self.ready(n)]
        if len(ready) < 2:
            return None
        n = rng.choice(ready)
        victim = self.procs[n]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        return n

    def restart(self, n: int) -> None:
        self.procs[n], self.log_files[n] = self._spawn()

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


async def retrying(call: Any, *, within: float = 120.0) -> Any:
    """Call an async function until it stops failing for transport reasons (a worker or the
    server briefly away)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except (TimeoutError, RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def status_of(handle: WorkflowHandle[Any, Any]) -> TaskStatus:
    return await retrying(lambda: asyncio.wait_for(handle.query(AgentTaskWorkflow.status), 10))


class Watcher:
    """Learns which tasks wait for approval from visibility, in one listing a second for all of
    them (a status query per task and poll would load the workers more than the tasks do)."""

    def __init__(self, client: Client, queue: str) -> None:
        self.client, self.queue = client, queue
        self.waiting: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)

    async def run(self) -> None:
        query = f"TaskQueue = '{self.queue}' AND AgentAwaitingApproval = true AND ExecutionStatus = 'Running'"
        while True:
            with contextlib.suppress(RPCError):
                async for execution in self.client.list_workflows(query):
                    self.waiting[execution.id].set()
            await asyncio.sleep(1.0)


async def drive(
    client: Client, queue: str, task_id: str, plan: Plan, deadline: float, watcher: Watcher
) -> Outcome:
    """Start one task, wait for its approval request, answer per ``plan``, await the result."""
    outcome = Outcome(task_id, plan)
    spec = json.loads(EXAMPLE.read_text())
    handle = await client.start_workflow(
        AgentTaskWorkflow.run, spec, id=task_id, task_queue=queue, result_type=TaskResult
    )
    result_task = asyncio.ensure_future(retrying(handle.result, within=deadline - time.monotonic()))
    waiting = asyncio.ensure_future(watcher.waiting[task_id].wait())
    await asyncio.wait(
        [result_task, waiting],
        timeout=max(1.0, deadline - time.monotonic()),
        return_when=asyncio.FIRST_COMPLETED,
    )
    waiting.cancel()
    status = await status_of(handle) if not result_task.done() else None
    if status is not None and status.pending:
        [request] = status.pending
        good: dict[str, Any] = {
            "request_id": request.request_id,
            "version": request.version,
            "decision": plan.answer,
            "principal": APPROVER,
        }
        if plan.answer == "edit":
            good["edited_args"] = {"total": EDITED_TOTAL}
        if plan.answer == "reject":
            good["reason"] = "numbers need another look"
        if plan.noise is not None:
            bad = {**good, "decision": "approve"}
            bad.pop("edited_args", None)
            if plan.noise == "stale":
                bad["version"] = STALE_VERSION
            else:
                bad["principal"] = "mallory"
            outcome.update_refusals += await send(handle, bad, plan.noise_via, f"{task_id}-bad")
        await send(handle, good, plan.via, f"{task_id}-good")
    remaining = max(1.0, deadline - time.monotonic())
    try:
        result: TaskResult = await asyncio.wait_for(result_task, remaining)
        outcome.phase, outcome.reason = result.phase.value, result.reason
    except TimeoutError:
        return outcome
    except Exception as err:  # a failed task: record its phase as the workflow reports it
        outcome.phase, outcome.reason = "failed", str(err)
    return outcome


def ignored_decisions(events_dir: Path) -> collections.Counter[str]:
    """``approval.ignored`` events per task, as delivered to the event sink (JSON lines, exactly once)."""
    counts: collections.Counter[str] = collections.Counter()
    for path in events_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("type") == "approval.ignored":
                counts[event["task_id"]] += 1
    return counts


async def send(handle: WorkflowHandle[Any, Any], decision: dict[str, Any], via: str, update_id: str) -> int:
    """Send a decision; returns 1 when an update was refused by the workflow's validator."""
    if via == "signal":
        await retrying(lambda: handle.signal(AgentTaskWorkflow.submit_decision, decision))
        return 0
    try:
        # A retried update keeps its id: the server deduplicates it instead of running it twice.
        await retrying(
            lambda: asyncio.wait_for(
                handle.execute_update(AgentTaskWorkflow.decide, decision, id=update_id), 30
            )
        )
    except WorkflowUpdateFailedError:
        return 1
    return 0


async def chaos_loop(fleet: Fleet, rng: random.Random, every: tuple[float, float], chaos: Chaos) -> None:
    while True:
        await asyncio.sleep(rng.uniform(*every))
        n = fleet.kill_one(rng)
        if n is None:
            continue
        chaos.kills += 1
        await asyncio.sleep(rng.uniform(0.2, 2.0))
        fleet.restart(n)
        chaos.restarts += 1


def rows_by_task(db: Path) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    if not db.exists():
        return rows
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for task_id, payload in conn.execute("SELECT task_id, payload_json FROM business_records"):
            rows[task_id].append(json.loads(payload))
    return rows


def leftover_sandboxes(data_dir: Path, task_ids: set[str], docker_used: bool) -> int:
    left = sum(1 for _ in (data_dir / "sandboxes").glob("*/labels.json"))
    if docker_used:
        import docker

        from activities.sandbox.base import LABEL_TASK

        for container in docker.from_env().containers.list(all=True):
            left += (container.labels or {}).get(LABEL_TASK) in task_ids
    return left


async def soak(args: argparse.Namespace) -> tuple[str, bool]:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="aw-soak-"))
    port = devserver.free_port()
    server = devserver.start_dev_server(
        port=port, db_filename=work / "temporal.db", log_file=work / "temporal.log", headless=True
    )
    address = f"127.0.0.1:{port}"
    queue = f"soak-{args.seed}"
    data_dir = work / "data"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "AGENT_WORKER_TASK_QUEUE": queue,
        "AGENT_WORKER_DATA_DIR": str(data_dir),
        "AGENT_WORKER_MODEL_PROVIDER": "scripted",
        "AGENT_WORKER_SANDBOX_BACKEND": args.sandbox,
        "AGENT_WORKER_LOG_FORMAT": "json",
        "PYTHONPATH": str(REPO),
    }
    fleet: Fleet | None = None
    chaos = Chaos()
    started = time.monotonic()
    try:
        await devserver.wait_ready(address)
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        fleet = Fleet(env, args.workers, work)
        plans = {f"soak-{args.seed}-{i:04d}": make_plan(rng) for i in range(args.tasks)}
        killer = asyncio.ensure_future(
            chaos_loop(fleet, random.Random(args.seed + 1), args.kill_every, chaos)
        )
        gate = asyncio.Semaphore(args.concurrency)
        deadline = started + args.deadline

        watcher = Watcher(client, queue)
        watching = asyncio.ensure_future(watcher.run())

        async def one(task_id: str, plan: Plan) -> Outcome:
            async with gate:
                return await drive(client, queue, task_id, plan, deadline, watcher)

        outcomes = await asyncio.gather(*(one(t, p) for t, p in plans.items()))
        for background in (killer, watching):
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background
        elapsed = time.monotonic() - started
    finally:
        if fleet is not None:
            fleet.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    return report(args, outcomes, chaos, elapsed, data_dir, work)


def report(
    args: argparse.Namespace,
    outcomes: list[Outcome],
    chaos: Chaos,
    elapsed: float,
    data_dir: Path,
    work: Path,
) -> tuple[str, bool]:
    rows = rows_by_task(data_dir / "business.db")
    ignored_by_task = ignored_decisions(data_dir / "events")
    for o in outcomes:
        o.ignored = ignored_by_task[o.task_id]
    phases = collections.Counter(o.phase for o in outcomes)
    expected = {"approve": "completed", "edit": "completed", "reject": "rejected"}
    wrong_phase = [o for o in outcomes if o.phase != "lost" and o.phase != expected[o.plan.answer]]
    approved = [o for o in outcomes if o.plan.answer in ("approve", "edit") and o.phase == "completed"]
    duplicates = sum(len(r) - 1 for r in rows.values() if len(r) > 1)
    missing = [o.task_id for o in approved if not rows.get(o.task_id)]
    unexpected = [o.task_id for o in outcomes if o.plan.answer == "reject" and rows.get(o.task_id)]
    wrong_total = [
        o.task_id
        for o in approved
        if rows.get(o.task_id)
        and (rows[o.task_id][0].get("total") == EDITED_TOTAL) != (o.plan.answer == "edit")
    ]
    lost = [o.task_id for o in outcomes if o.phase == "lost"]
    noise = collections.Counter(f"{o.plan.noise} via {o.plan.noise_via}" for o in outcomes if o.plan.noise)
    signalled_noise = sum(1 for o in outcomes if o.plan.noise and o.plan.noise_via == "signal")
    updated_noise = sum(1 for o in outcomes if o.plan.noise and o.plan.noise_via == "update")
    ignored = sum(o.ignored for o in outcomes)
    refused = sum(o.update_refusals for o in outcomes)
    leftover = leftover_sandboxes(data_dir, {o.task_id for o in outcomes}, args.sandbox == "docker")
    ok = not (duplicates or lost or missing or unexpected or wrong_total or wrong_phase or leftover)
    lines = [
        "# Chaos soak",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs; "
        f"`python -m bench.soak --tasks {args.tasks} --workers {args.workers} "
        f"--kill-every {args.kill_every[0]:g}:{args.kill_every[1]:g} --sandbox {args.sandbox} "
        f"--seed {args.seed}`",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| tasks | {len(outcomes)} in {elapsed:.0f} s ({len(outcomes) / elapsed:.2f} tasks/s) |",
        f"| worker processes | {args.workers}; {chaos.kills} SIGKILLs, {chaos.restarts} restarts |",
        f"| final phases | {_counts(phases)} |",
        f"| plans | {_counts(collections.Counter(o.plan.answer for o in outcomes))} |",
        f"| bad decisions sent first | {_counts(noise)} |",
        f"| bad signals recorded as ignored | {ignored} of {signalled_noise} |",
        f"| bad updates refused by the validator | {refused} of {updated_noise} |",
        f"| approved commits (approve/edit, completed) | {len(approved)} |",
        f"| business rows | {sum(len(r) for r in rows.values())} |",
        f"| duplicates | {duplicates} |",
        f"| missing writes | {len(missing)} |",
        f"| writes for rejected tasks | {len(unexpected)} |",
        f"| edited totals wrong | {len(wrong_total)} |",
        f"| tasks in an unexpected phase | {len(wrong_phase)} |",
        f"| lost tasks | {len(lost)} |",
        f"| leftover sandboxes ({args.sandbox}) | {leftover} |",
        "",
        f"Verdict: {'PASS' if ok else 'FAIL'}. Worker logs and the server database: {work}",
    ]
    for label, items in (("lost", lost), ("missing", missing), ("unexpected", unexpected)):
        if items:
            lines.append(f"{label}: {', '.join(items[:20])}")
    for o in wrong_phase[:10]:
        lines.append(f"unexpected phase: {o.task_id} planned {o.plan.answer}, ended {o.phase}: {o.reason}")
    return "\n".join(lines) + "\n", ok


def _counts(counter: collections.Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))


def _interval(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--kill-every",
        type=_interval,
        default=(5.0, 15.0),
        help="seconds between kills, MIN:MAX (only while another worker polls)",
    )
    parser.add_argument("--sandbox", choices=["process", "docker"], default="process")
    parser.add_argument("--concurrency", type=int, default=100, help="tasks in flight at once")
    parser.add_argument(
        "--deadline", type=float, default=540.0, help="seconds before unfinished tasks count as lost"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/soak.md")
    args = parser.parse_args(argv)
    # Killed from outside, still stop the server and workers it started (in the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    text, ok = asyncio.run(soak(args))
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
