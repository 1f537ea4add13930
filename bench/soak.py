"""Chaos soak: many example tasks through approvals while worker processes are SIGKILLed at random.

    python -m bench.soak [--tasks 200] [--workers 2] [--kill-every 4:12] [--sandbox process|docker]
                         [--stores local|shared] [--seed N] [--out bench/results/soak.md]

Starts its own Temporal dev server (file database, WAL) and ``--workers`` worker processes. Every
task is the monthly-report example: a sandbox computation, then an approval before the write. For
each task a seeded plan picks the human's answer (approve, edit, reject) and, often, a bad decision
first: a stale version or an unauthorized principal, sent as a signal (recorded as ignored) or as an
update (refused before it reaches history). Meanwhile a random worker is SIGKILLed every few seconds
and restarted. At the end it prints tasks by final phase, business writes against approved commits,
duplicates, lost tasks and leftover sandboxes, and exits non-zero on any duplicate, lost task, write
of a rejected task, or missing write.

``--stores local`` (the default): the workers share one data dir and its embedded stores (one host).
``--stores shared``: each worker has its own data dir (its own host) and they share a PostgreSQL
(state stores and business writes) and an S3 bucket (artifacts) started for the run. The counts then
come from PostgreSQL, and it also fails when an evidence bundle fetched with either worker's config
does not verify with either's, when shared state landed on a worker's disk, or when no task whose
turns ran on both workers has them answered from the shared journal (``bench.soak_shared``,
``bench.soak_journal``; results in ``bench/results/soak-shared.md``).
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
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_worker.cli import devserver
from agent_worker.schemas.config import EXAMPLE_AGENT, WorkerConfig
from agent_worker.schemas.payloads import DATA_CONVERTER
from agent_worker.schemas.tasks import TaskResult, TaskStatus
from agent_worker.schemas.visibility import AWAITING_QUERY
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from bench import soak_shared
from bench.soak_fleet import Chaos, Fleet, chaos_loop

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples/monthly_report/task.json"
APPROVER = "finance-lead"
EDITED_TOTAL = "9600.00"
STALE_VERSION = "sha256:" + "0" * 64
DEADLINE = 540.0  # seconds from the start before an unfinished task counts as lost


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
    result: TaskResult | None = None


def make_plan(rng: random.Random) -> Plan:
    answer = rng.choices(["approve", "edit", "reject"], weights=[50, 25, 25])[0]
    noise = rng.choices([None, "stale", "unauthorized"], weights=[50, 25, 25])[0]
    return Plan(answer, noise, rng.choice(["signal", "update"]), rng.choice(["signal", "update"]))


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
        query = f"TaskQueue = '{self.queue}' AND {AWAITING_QUERY}"
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
        outcome.phase, outcome.reason, outcome.result = result.phase.value, result.reason, result
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


def rows_by_task(db: Path) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    if not db.exists():
        return rows
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for task_id, payload in conn.execute("SELECT task_id, payload_json FROM business_records"):
            rows[task_id].append(json.loads(payload))
    return rows


def leftover_sandboxes(data_dirs: list[Path], task_ids: set[str], docker_used: bool) -> int:
    """Process sandboxes left in any worker's data dir, plus the soak's labelled containers."""
    left = sum(1 for d in data_dirs for _ in (d / "sandboxes").glob("*/labels.json"))
    if docker_used:
        import docker
        from agent_worker.activities.sandbox.base import LABEL_TASK

        # The list endpoint alone: an inspect per container fails on one being made or removed.
        for container in docker.from_env().api.containers(all=True, filters={"label": LABEL_TASK}):
            left += (container.get("Labels") or {}).get(LABEL_TASK) in task_ids
    return left


@dataclass
class Findings:
    """What the stores hold once the workers stopped."""

    rows: dict[str, list[dict[str, Any]]]
    ignored: collections.Counter[str]
    leftover: int
    shared: soak_shared.SharedFindings | None = None


async def soak(args: argparse.Namespace) -> tuple[str, bool]:
    work = Path(tempfile.mkdtemp(prefix="aw-soak-"))
    with contextlib.ExitStack() as stack:
        stores = stack.enter_context(soak_shared.shared_stores(work)) if args.stores == "shared" else None
        return await _soak(args, work, stores)


async def _soak(
    args: argparse.Namespace, work: Path, stores: soak_shared.SharedStores | None
) -> tuple[str, bool]:
    rng = random.Random(args.seed)
    port = devserver.free_port()
    server = devserver.start_dev_server(
        port=port, db_filename=work / "temporal.db", log_file=work / "temporal.log", headless=True
    )
    address = f"127.0.0.1:{port}"
    queue = f"soak-{args.seed}"
    base = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "AGENT_WORKER_TASK_QUEUE": queue,
        "AGENT_WORKER_AGENTS": EXAMPLE_AGENT,
        "AGENT_WORKER_MODEL_PROVIDER": "scripted",
        "AGENT_WORKER_SANDBOX_BACKEND": args.sandbox,
        "AGENT_WORKER_LOG_FORMAT": "json",
        "PYTHONPATH": str(REPO),
    }
    if stores is None:  # one host: every worker on the same data dir
        data_dirs = [work / "data"]
        envs = [{**base, "AGENT_WORKER_DATA_DIR": str(data_dirs[0])}] * args.workers
    else:  # a host per worker
        data_dirs = [work / f"data-{n + 1}" for n in range(args.workers)]
        # Two hosts on one machine: each its own host id (its sandboxes' home queue), stated here
        # rather than derived from the data dir, so that the report can name them.
        envs = [
            {**base, **stores.worker_env(d), "AGENT_WORKER_HOST_ID": f"soak-host-{n + 1}"}
            for n, d in enumerate(data_dirs)
        ]
    fleet: Fleet | None = None
    chaos = Chaos()
    started = time.monotonic()
    try:
        await devserver.wait_ready(address)
        client = await Client.connect(address, data_converter=DATA_CONVERTER)
        fleet = Fleet(envs, work)
        await fleet.wait_ready()
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
        fleet.stop()
        slot_of_pid, fleet = fleet.slot_of_pid, None
        task_ids = {o.task_id for o in outcomes}
        leftover = leftover_sandboxes(data_dirs, task_ids, args.sandbox == "docker")
        if stores is None:
            findings = Findings(
                rows_by_task(data_dirs[0] / "business.db"),
                ignored_decisions(data_dirs[0] / "events"),
                leftover,
            )
        else:
            configs = [WorkerConfig.from_env(env) for env in envs]
            shared = await soak_shared.check(
                client, configs, outcomes, slot_of_pid, chaos.killed, data_dirs, work
            )
            # What is left in a data dir when the tasks closed (counted before), then what each
            # host's reaper would not remove (after).
            shared.left_at_close = leftover
            shared.reaped = await asyncio.to_thread(soak_shared.reap_each_host, envs, work)
            leftover = leftover_sandboxes(data_dirs, task_ids, args.sandbox == "docker")
            findings = Findings(
                soak_shared.business_rows(stores.postgres.dsn),
                soak_shared.ignored_decisions(stores.postgres.dsn),
                leftover,
                shared,
            )
    finally:
        if fleet is not None:
            fleet.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    return report(args, outcomes, chaos, elapsed, findings, work)


def report(
    args: argparse.Namespace,
    outcomes: list[Outcome],
    chaos: Chaos,
    elapsed: float,
    findings: Findings,
    work: Path,
) -> tuple[str, bool]:
    rows, leftover, shared = findings.rows, findings.leftover, findings.shared
    for o in outcomes:
        o.ignored = findings.ignored[o.task_id]
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
    ok = not (duplicates or lost or missing or unexpected or wrong_total or wrong_phase or leftover)
    ok = ok and (shared is None or shared.ok)
    stores = "" if args.stores == "local" else f" --stores {args.stores}"
    stores += "" if args.deadline == DEADLINE else f" --deadline {args.deadline:g}"
    lines = [
        "# Chaos soak" + (", shared stores" if shared else ""),
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs; "
        f"`python -m bench.soak --tasks {args.tasks} --workers {args.workers} "
        f"--kill-every {args.kill_every[0]:g}:{args.kill_every[1]:g} --sandbox {args.sandbox}{stores} "
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
        f"| leftover sandboxes ({args.sandbox}{', after each host reaped' if shared else ''}) | {leftover} |",
    ]
    if shared is not None:
        lines += [f"| {name} | {value} |" for name, value in shared.rows()]
    lines += ["", f"Verdict: {'PASS' if ok else 'FAIL'}. Worker logs and the server database: {work}"]
    if shared is not None:
        lines += ["", *shared.notes()]
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
        "--deadline", type=float, default=DEADLINE, help="seconds before unfinished tasks count as lost"
    )
    parser.add_argument(
        "--stores",
        choices=["local", "shared"],
        default="local",
        help="local: one data dir for all workers; shared: a data dir each, PostgreSQL and S3 shared",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--out", type=Path, help="default: bench/results/soak.md (soak-shared.md with --stores shared)"
    )
    args = parser.parse_args(argv)
    args.out = args.out or REPO / (
        "bench/results/soak-shared.md" if args.stores == "shared" else "bench/results/soak.md"
    )
    # Killed from outside, still stop the server and workers it started (in the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    text, ok = asyncio.run(soak(args))
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
