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

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from cli import devserver
from schemas.tasks import TaskResult, TaskStatus

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
        self.started = 0
        for _ in range(size):
            self.procs.append(self._spawn())

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.started += 1
        with (self.logs / f"worker-{self.started}.log").open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "cli.main", "worker"],
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill_one(self, rng: random.Random) -> int:
        n = rng.randrange(len(self.procs))
        victim = self.procs[n]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        return n

    def restart(self, n: int) -> None:
        self.procs[n] = self._spawn()

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
        except (TimeoutError, RPCError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def status_of(handle: WorkflowHandle[Any, Any]) -> TaskStatus:
    return await retrying(lambda: asyncio.wait_for(handle.query("status", result_type=TaskStatus), 10))


async def drive(client: Client, queue: str, task_id: str, plan: Plan, deadline: float) -> Outcome:
    """Start one task, wait for its approval request, answer per ``plan``, await the result."""
    outcome = Outcome(task_id, plan)
    spec = json.loads(EXAMPLE.read_text())
    handle = await client.start_workflow(
        "AgentTask", spec, id=task_id, task_queue=queue, result_type=TaskResult
    )
    while True:
        status = await status_of(handle)
        if status.pending or status.phase.terminal:
            break
        if time.monotonic() > deadline:
            return outcome
        await asyncio.sleep(0.5)
    if status.pending:
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
            outcome.update_refusals += await send(handle, bad, plan.noise_via)
        await send(handle, good, plan.via)
    remaining = max(1.0, deadline - time.monotonic())
    try:
        result: TaskResult = await asyncio.wait_for(retrying(handle.result, within=remaining), remaining)
        outcome.phase, outcome.reason = result.phase.value, result.reason
    except TimeoutError:
        return outcome
    except Exception as err:  # a failed task: record its phase as the workflow reports it
        outcome.phase, outcome.reason = "failed", str(err)
    final = await status_of(handle)
    outcome.ignored = sum(1 for e in final.last_events if e.type.value == "approval.ignored")
    return outcome


async def send(handle: WorkflowHandle[Any, Any], decision: dict[str, Any], via: str) -> int:
    """Send a decision; returns 1 when an update was refused by the workflow's validator."""
    if via == "signal":
        await retrying(lambda: handle.signal("submit_decision", decision))
        return 0
    try:
        await retrying(lambda: asyncio.wait_for(handle.execute_update("decide", decision), 30))
    except WorkflowUpdateFailedError:
        return 1
    return 0


async def chaos_loop(fleet: Fleet, rng: random.Random, every: tuple[float, float], chaos: Chaos) -> None:
    while True:
        await asyncio.sleep(rng.uniform(*every))
        n = fleet.kill_one(rng)
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
    port = _free_port()
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

        async def one(task_id: str, plan: Plan) -> Outcome:
            async with gate:
                return await drive(client, queue, task_id, plan, deadline)

        outcomes = await asyncio.gather(*(one(t, p) for t, p in plans.items()))
        killer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await killer
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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _interval(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-every", type=_interval, default=(4.0, 12.0), help="seconds, MIN:MAX")
    parser.add_argument("--sandbox", choices=["process", "docker"], default="process")
    parser.add_argument("--concurrency", type=int, default=100, help="tasks in flight at once")
    parser.add_argument(
        "--deadline", type=float, default=540.0, help="seconds before unfinished tasks count as lost"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/soak.md")
    args = parser.parse_args(argv)
    text, ok = asyncio.run(soak(args))
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
