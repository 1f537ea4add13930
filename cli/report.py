"""``agent-worker report [--since 7d]``: what the fleet delivered, per agent.

For the tasks closed in the window (from Temporal visibility, narrowed by ``--task-queue``): how many,
how many **accepted** (completed, with complete evidence: every write confirmed by lookup) and how
many wasted (rejected, failed, handed off, cancelled), the acceptance rate, end-to-end time (p50,
p95), time working against time waiting for a human (from each task's usage), the model cost, in
total and per accepted deliverable, and the turns and commands taken over from a lost worker (how
many, and their mean time from its last heartbeat to resuming elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.cli.schedules import parse_interval

__all__ = ["AgentReport", "register", "report"]


@dataclass
class AgentReport:
    """One agent's deliveries in the window."""

    agent: str
    tasks: int = 0
    accepted: int = 0
    phases: dict[str, int] = field(default_factory=dict)
    end_to_end_p50_seconds: float = 0.0
    end_to_end_p95_seconds: float = 0.0
    active_seconds: float = 0.0
    waiting_seconds: float = 0.0
    cost_usd: float = 0.0
    takeovers: int = 0
    takeover_seconds: float = 0.0

    @property
    def takeover_mean_seconds(self) -> float | None:
        """Mean time from a lost worker's last heartbeat to its work resuming elsewhere."""
        return self.takeover_seconds / self.takeovers if self.takeovers else None

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.tasks if self.tasks else 0.0

    @property
    def cost_per_accepted_usd(self) -> float | None:
        return self.cost_usd / self.accepted if self.accepted else None

    def as_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "acceptance_rate": self.acceptance_rate,
            "cost_per_accepted_usd": self.cost_per_accepted_usd,
            "takeover_mean_seconds": self.takeover_mean_seconds,
        }


def register(sub: Any) -> None:
    """Add ``report``."""
    report_cmd = sub.add_parser("report", help="what the fleet delivered, per agent: acceptance, time, cost")
    report_cmd.add_argument(
        "--since", default="7d", help="the window: N followed by s, m, h or d (default 7d)"
    )
    report_cmd.add_argument("--task-queue", help="only the tasks of this task queue")
    report_cmd.add_argument("--json", action="store_true", help="one JSON object per agent")
    report_cmd.set_defaults(handler=cmd_report)


def window(text: str) -> timedelta:
    """``7d`` -> 7 days.

    Raises:
        CliError: not N followed by s, m, h or d.
    """
    return parse_interval(text, "--since")


async def cmd_report(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    since = datetime.now(UTC) - window(args.since)
    agents = await report(await ctx.tasks(), since, task_queue=args.task_queue)
    if args.json:
        for entry in agents:
            print(json.dumps(entry.as_json(), sort_keys=True), file=out)
        return 0
    print(
        f"{'agent':20} {'tasks':>6} {'accepted':>9} {'e2e p50':>8} {'e2e p95':>8} "
        f"{'active':>8} {'waiting':>8} {'cost/accepted':>14} {'takeovers':>14}",
        file=out,
    )
    for e in agents:
        per = f"${e.cost_per_accepted_usd:.4f}" if e.cost_per_accepted_usd is not None else "-"
        times = (e.end_to_end_p50_seconds, e.end_to_end_p95_seconds, e.active_seconds, e.waiting_seconds)
        mean = e.takeover_mean_seconds
        takeovers = f"{e.takeovers} x {mean:.1f}s" if mean is not None else "0"
        print(
            f"{e.agent:20} {e.tasks:>6} {e.acceptance_rate:>8.0%} "
            + " ".join(f"{t:>7.1f}s" for t in times)
            + f" {per:>14} {takeovers:>14}",
            file=out,
        )
    if not agents:
        print(f"no task closed since {since.isoformat(timespec='seconds')}", file=out)
    return 0


async def report(tasks: Any, since: datetime, *, task_queue: str | None = None) -> list[AgentReport]:
    """Per agent, the deliveries of the tasks closed since ``since``."""
    from agent_worker.schemas import visibility

    from agent_worker.client import TASKS_QUERY, queryable

    # A run that continued as new is not a task's end: its last run is.
    query = (
        f"{TASKS_QUERY} AND ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew' "
        f"AND CloseTime > '{since.isoformat()}'"
    )
    if task_queue is not None:
        if not queryable(task_queue):
            raise CliError(f"task queue {task_queue!r} is not a valid task queue name", 2)
        query += f" AND TaskQueue = '{task_queue}'"
    executions = [e async for e in tasks.temporal.list_workflows(query)]
    results = await asyncio.gather(*(_result(tasks, e.id, e.run_id) for e in executions))
    by_agent: dict[str, AgentReport] = {}
    durations: dict[str, list[float]] = {}
    for execution, result in zip(executions, results, strict=True):
        agent = execution.typed_search_attributes.get(visibility.AGENT) or "?"
        entry = by_agent.setdefault(agent, AgentReport(agent))
        entry.tasks += 1
        if execution.close_time and execution.start_time:
            durations.setdefault(agent, []).append(
                (execution.close_time - execution.start_time).total_seconds()
            )
        phase = result.phase.value if result is not None else "failed"
        entry.phases[phase] = entry.phases.get(phase, 0) + 1
        if result is None:
            continue
        if phase == "completed" and result.evidence_complete:
            entry.accepted += 1
        entry.active_seconds += result.usage.active_seconds
        entry.waiting_seconds += result.usage.waiting_seconds
        entry.cost_usd += result.usage.cost_usd
        entry.takeovers += result.usage.takeovers
        entry.takeover_seconds += result.usage.takeover_seconds
    for agent, entry in by_agent.items():
        spans = sorted(durations.get(agent, []))
        if spans:
            entry.end_to_end_p50_seconds = statistics.median(spans)
            entry.end_to_end_p95_seconds = spans[min(len(spans) - 1, round(0.95 * (len(spans) - 1)))]
    return sorted(by_agent.values(), key=lambda e: e.agent)


async def _result(tasks: Any, task_id: str, run_id: str | None) -> Any:
    """The closed run's ``TaskResult``, or None when it ended without one (failed, terminated)."""
    try:
        return await tasks.temporal.get_workflow_handle(
            task_id, run_id=run_id, result_type=_result_type()
        ).result(follow_runs=False)
    except Exception:  # a failed, terminated or timed-out run has no result to count
        return None


def _result_type() -> Any:
    from agent_worker.schemas.tasks import TaskResult

    return TaskResult
