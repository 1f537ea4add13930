"""``agent-worker shadow``: replay closed tasks with a candidate agent, without side effects.

::

    agent-worker shadow --agent monthly-report --candidate mypkg.agents:candidate --since 7d
    agent-worker shadow --agent recorder --candidate mypkg.agents:v2 --tasks task-ids.txt \\
        --scorer mypkg.evals:score --out reports/
    agent-worker shadow --agent recorder --candidate mypkg.agents:v2 --histories exported/  # CI

Reads the closed tasks of agent ``--agent`` (from the cluster: ``--since``, default 7 days, or
``--tasks``, a file of task ids one a line; or exported history JSON files: ``--histories``) into
recorded tasks (``cli.shadow_record``; a task that continued as new is read from all its runs),
stores them in the artifact store the workers read, and starts one ``ShadowRun`` workflow on the
task queue (``workflows.shadow``): the fleet replays each task with the candidate, ``--concurrency``
at a time, executing no business write. When it ends, the report is written to ``--out``
(``shadow-report.json`` and ``shadow-report.md``) and summed up here.

The candidate (``module:attribute``, an ``AgentRegistration`` or a list) must be importable on the
agent workers. Exit 0; 1 with ``--fail-on-diverge`` when a task diverged; 2 on a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

if TYPE_CHECKING:
    from agent_worker.schemas.shadow import RecordedTask, ShadowRunResult
    from temporalio.client import WorkflowHistory

DEFAULT_SINCE = "7d"
DEFAULT_LIMIT = 1000
DEFAULT_OUT = Path("shadow-report")
REPORT_JSON = "shadow-report.json"
REPORT_MARKDOWN = "shadow-report.md"

__all__ = ["REPORT_JSON", "REPORT_MARKDOWN", "cmd_shadow", "register"]


def register(sub: Any) -> argparse.ArgumentParser:
    """Add ``shadow`` to ``agent-worker``'s subparsers."""
    from agent_worker.schemas.shadow import DEFAULT_SHADOW_CONCURRENCY

    parser = sub.add_parser(
        "shadow",
        help="replay closed tasks with a candidate agent, without side effects, and report the differences",
        description="Run a candidate agent on the recorded inputs of closed tasks, as Temporal workflows on "
        "the fleet: no business write is executed (each proposed write is recorded and compared), sandbox "
        "commands run in fresh sandboxes, approvals are answered from the recorded decisions when the "
        "proposed action has the recorded version (else the task is 'diverged'). Writes a JSON and a "
        "Markdown report. Exit 0; 1 with --fail-on-diverge when a task diverged; 2 on a usage error.",
        epilog="example: agent-worker shadow --agent recorder --candidate mypkg.agents:v2 --since 7d",
    )
    parser.add_argument("--agent", required=True, help="replay the closed tasks of this agent")
    parser.add_argument(
        "--candidate", required=True, help="the candidate's registration, module:attribute (on the workers)"
    )
    parser.add_argument("--model", help="run the candidate on this model instead of its own")
    parser.add_argument(
        "--scorer", help="a Python callable module:function scoring each final answer (docs/shadow.md)"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--since", help=f"tasks started within this long, e.g. 12h, 7d (default: {DEFAULT_SINCE})"
    )
    source.add_argument("--tasks", type=Path, help="a file of task ids, one a line")
    source.add_argument(
        "--histories", type=Path, nargs="+", help="exported history JSON files or directories"
    )
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="at most this many tasks (cluster)")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_SHADOW_CONCURRENCY,
        help=f"tasks replayed at once (default: {DEFAULT_SHADOW_CONCURRENCY})",
    )
    parser.add_argument("--id", help="the shadow run's workflow id (default: shadow-<time>-<random>)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"report directory (default: {DEFAULT_OUT})"
    )
    parser.add_argument("--fail-on-diverge", action="store_true", help="exit 1 when any task diverged (CI)")
    parser.set_defaults(handler=cmd_shadow)
    return parser


async def cmd_shadow(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    """Run ``agent-worker shadow``; returns the exit code."""
    from agent_worker.activities.stores.artifacts import build_artifact_store
    from agent_worker.schemas.shadow import MAX_SHADOW_CONCURRENCY, ShadowRunInput, ShadowTaskRef

    out = out or sys.stdout
    if not 1 <= args.concurrency <= MAX_SHADOW_CONCURRENCY:
        raise CliError(f"--concurrency {args.concurrency}: must be 1 to {MAX_SHADOW_CONCURRENCY}", 2)
    if args.limit < 1:
        raise CliError(f"--limit {args.limit}: must be at least 1", 2)
    if ":" not in args.candidate or (args.scorer is not None and ":" not in args.scorer):
        raise CliError("--candidate and --scorer are import paths: package.module:attribute", 2)
    client = await ctx.temporal()
    recorded, skipped = await _recorded_tasks(args, ctx, client)
    if not recorded:
        raise CliError(f"no closed task of agent {args.agent!r} to replay ({skipped} histories skipped)", 2)
    store = build_artifact_store(ctx.config)
    refs = [
        ShadowTaskRef(
            task_id=t.task_id, ref=await asyncio.to_thread(store.put_json, t.model_dump(mode="json"))
        )
        for t in recorded
    ]
    shadow_id = args.id or f"shadow-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    print(f"shadow run {shadow_id}: {len(refs)} tasks of {args.agent} with {args.candidate}", file=out)
    result = await run_shadow(
        client,
        ctx.config.task_queue,
        shadow_id,
        ShadowRunInput(
            candidate=args.candidate,
            model=args.model,
            scorer=args.scorer,
            tasks=refs,
            max_concurrency=args.concurrency,
        ),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / REPORT_JSON).write_bytes(await asyncio.to_thread(store.get, result.json_ref))
    (args.out / REPORT_MARKDOWN).write_bytes(await asyncio.to_thread(store.get, result.markdown_ref))
    s = result.summary
    print(
        f"{s.tasks} tasks: {s.diverged} diverged, {s.failed} failed; actions same {s.same_actions}, "
        f"different {s.different_actions}, missing {s.missing_actions}; writes proposed {s.writes_proposed}, "
        f"executed {s.writes_executed}; exact answers {s.exact_matches}"
        + (f"; mean score {s.mean_score:.3f}" if s.mean_score is not None else "")
        + f"; cost ${s.cost_usd:.4f} (recorded ${s.recorded_cost_usd:.4f})",
        file=out,
    )
    for task_id in s.diverged_tasks:
        print(f"  diverged: {task_id}", file=out)
    print(f"report: {args.out / REPORT_JSON}, {args.out / REPORT_MARKDOWN}", file=out)
    return 1 if args.fail_on_diverge and s.diverged else 0


async def run_shadow(client: Any, task_queue: str, shadow_id: str, input: Any) -> ShadowRunResult:
    """Start the ``ShadowRun`` workflow (or attach to it, when ``shadow_id`` already runs) and wait."""
    from agent_worker.schemas.shadow import SHADOW_RUN_WORKFLOW, ShadowRunResult
    from temporalio.common import WorkflowIDConflictPolicy

    handle = await client.start_workflow(
        SHADOW_RUN_WORKFLOW,
        input.model_dump(mode="json"),
        id=shadow_id,
        task_queue=task_queue,
        result_type=ShadowRunResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    return await handle.result()


async def _recorded_tasks(
    args: argparse.Namespace, ctx: CliContext, client: Any
) -> tuple[list[RecordedTask], int]:
    from agent_worker.cli.shadow_record import NotRecordable, read_recorded_task

    recorded: dict[str, RecordedTask] = {}
    skipped = 0
    converter = client.data_converter
    async for chain in _chains(args, client):
        try:
            task = await read_recorded_task(chain, converter)
        except NotRecordable:
            skipped += 1
            continue
        if task.agent != args.agent or task.task_id in recorded:
            # Another agent's task, or an older run of a task id already read (the cluster lists the
            # newest first; a reused id, or a file listing a task twice): one replay per task.
            skipped += 1
            continue
        recorded[task.task_id] = task
    return list(recorded.values()), skipped


async def _chains(args: argparse.Namespace, client: Any) -> AsyncIterator[list[WorkflowHistory]]:
    """Each task to read, as the runs of its chain, oldest first (a task continues as new before it
    waits for a person: its actions and their decisions are spread over its runs)."""
    from agent_worker.activities.task_history import chain_of
    from agent_worker.cli.policy_command import file_chains, history_files
    from agent_worker.cli.replay import cluster_chains
    from agent_worker.cli.schedules import parse_interval
    from agent_worker.schemas import visibility
    from agent_worker.schemas.visibility import WORKFLOW_TYPE, queryable

    if args.histories:
        async for chain in file_chains(history_files(args.histories)):
            yield chain
        return
    if args.tasks:
        try:
            ids = [line.strip() for line in args.tasks.read_text().splitlines() if line.strip()]
        except OSError as err:
            raise CliError(f"--tasks {args.tasks}: cannot read it ({err.strerror or err})", 2) from None
        for task_id in ids:
            yield await chain_of(client, await client.get_workflow_handle(task_id).fetch_history())
        return
    since = parse_interval(args.since or DEFAULT_SINCE, "--since")
    cutoff = (datetime.now(UTC) - since).strftime("%Y-%m-%dT%H:%M:%SZ")
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus != 'Running' AND StartTime >= '{cutoff}'"
    if queryable(args.agent):
        # The agent is a search attribute: only its tasks' histories are fetched (a name that cannot
        # stand in a query is filtered after the fetch, as every name is).
        query += f" AND {visibility.AGENT.name} = '{args.agent}'"
    async for chain in cluster_chains(client, query, args.limit):
        yield chain
