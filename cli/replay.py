"""``agent-worker replay``: replay workflow histories against this code before deploying it.

A workflow change that is not deterministic breaks every task in flight the moment a new worker
picks it up. Run this with the new code, before the deploy::

    agent-worker replay                                  # AgentTask runs: running, or started in 7 days
    agent-worker replay --query "AgentTenant = 'acme'" --since 30d --limit 500
    agent-worker replay --dir tests/histories            # history JSON files (temporal workflow show -o json)

Histories come from the cluster through visibility (``--query``, default ``WorkflowType =
'AgentTask'``). ``--since`` keeps runs started within that long, plus every run still open whatever
its age, since those are the ones a deploy meets. ``--limit`` caps how many runs are fetched, most
recent first. With ``--dir``, the histories are ``*.json`` files under that directory instead; a
``workflow_ids.json`` beside them maps file names to workflow ids (the ids sub-task ids derive from),
else the file name is taken as the id.

Each history replays with ``temporalio.worker.Replayer`` against the workflows in ``workflows/`` and
the data converter clients and workers use (encrypted payloads need ``AGENT_WORKER_ENCRYPTION_KEYS``).
One line per run, then a summary. Exit code 0 when every history replays, 1 when any does not (a
nondeterminism, or another workflow task failure), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

# Only the command itself needs the SDK: building agent-worker's parser stays cheap.
if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHistory
    from temporalio.converter import DataConverter

DEFAULT_SINCE = "7d"
DEFAULT_LIMIT = 200
HISTORY_IDS = "workflow_ids.json"

OK = "OK"
NONDETERMINISTIC = "NONDETERMINISTIC"
FAILED = "FAILED"


def default_workflows() -> list[type]:
    """Every workflow this package's workers run (``workflows.__all__``)."""
    from agent_worker import workflows

    return [getattr(workflows, name) for name in workflows.__all__]


def default_query() -> str:
    """Every task run (``agent_worker.client.TASKS_QUERY``, which owns the workflow type's name)."""
    from agent_worker.client import TASKS_QUERY

    return TASKS_QUERY


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``replay`` subcommand to ``agent-worker``'s subparsers."""
    parser = sub.add_parser(
        "replay",
        help="replay recent histories (or history files) against this code; exit 1 on nondeterminism",
        description="Replay workflow histories against this code before deploying it. Exit code 0 "
        "when every history replays, 1 when any does not, 2 on a usage error.",
    )
    parser.add_argument("--query", help="visibility query choosing the runs (default: every task run)")
    parser.add_argument(
        "--since",
        help=f"runs started within this long (e.g. 12h, 30d), plus all open runs (default: {DEFAULT_SINCE})",
    )
    parser.add_argument(
        "--limit", type=int, help=f"at most this many runs, most recent first (default: {DEFAULT_LIMIT})"
    )
    parser.add_argument(
        "--dir", type=Path, help="replay the history JSON files under this directory instead of the cluster"
    )
    parser.set_defaults(handler=_handle)
    return parser


add_parser = register  # its earlier name


async def _handle(args: argparse.Namespace, ctx: CliContext) -> int:
    data_converter = None
    if args.dir is not None:
        from agent_worker.security.codec import KeySpecError, converter_for

        try:
            data_converter = converter_for(ctx.config)
        except KeySpecError as err:
            raise CliError(str(err), 2) from None
    return await cmd_replay(args, ctx.temporal, data_converter=data_converter)


@dataclass
class ReplayReport:
    """What a replay found: run counts by outcome."""

    total: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {OK: 0, NONDETERMINISTIC: 0, FAILED: 0})

    @property
    def failures(self) -> int:
        return self.total - self.counts[OK]

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0


async def replay_histories(
    histories: AsyncIterator[WorkflowHistory],
    *,
    workflows: Sequence[type],
    data_converter: DataConverter,
    out: TextIO,
) -> ReplayReport:
    """Replay each history against ``workflows``, printing one line per run and a summary.

    Args:
        histories: The histories to replay.
        workflows: Workflow classes, registered under their ``@workflow.defn`` names.
        data_converter: The converter the histories' payloads were written with.
        out: Where the lines go.
    """
    from temporalio.worker import Replayer
    from temporalio.workflow import NondeterminismError

    from agent_worker.worker import workflow_runner

    report = ReplayReport()
    # The worker's own sandbox (packages passed through as it does), so a replay checks what runs.
    replayer = Replayer(
        workflows=list(workflows), data_converter=data_converter, workflow_runner=workflow_runner()
    )
    async with replayer.workflow_replay_iterator(histories) as results:
        async for result in results:
            history, failure = result.history, result.replay_failure
            if failure is None:
                outcome = OK
            elif isinstance(failure, NondeterminismError):
                outcome = NONDETERMINISTIC
            else:
                outcome = FAILED
            report.total += 1
            report.counts[outcome] += 1
            line = (
                f"{outcome:<16}  {_workflow_type(history)}  {history.workflow_id}  {history.run_id}  "
                f"{len(history.events)} events"
            )
            if failure is not None:
                line += f": {_one_line(failure)}"
            print(line, file=out, flush=True)
    counts = ", ".join(f"{n} {outcome}" for outcome, n in report.counts.items() if n or outcome == OK)
    noun = "history" if report.total == 1 else "histories"
    print(f"replayed {report.total} {noun}: {counts}", file=out)
    if report.total == 0:
        print("nothing matched: no history was checked", file=out)
    elif report.failures:
        print(
            f"{report.failures} of them do not replay on this code: workers running it would fail "
            "those still open. Guard the change with workflow.patched(), or keep the old code.",
            file=out,
        )
    return report


def visibility_query(query: str | None, since: timedelta | None, now: datetime) -> str:
    """The list filter: ``query``, narrowed to runs started since ``now - since`` or still open."""
    base = (query or default_query()).strip()
    if since is None:
        return base
    cutoff = (now - since).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"({base}) AND (StartTime >= '{cutoff}' OR ExecutionStatus = 'Running')"


async def cluster_histories(client: Client, query: str, limit: int) -> AsyncIterator[WorkflowHistory]:
    """Histories of the runs ``query`` lists (at most ``limit``), fetched one by one."""
    async for history in client.list_workflows(query, limit=limit).map_histories():
        yield history


async def cluster_chains(client: Client, query: str, limit: int) -> AsyncIterator[list[WorkflowHistory]]:
    """Each task among the runs ``query`` lists (at most ``limit``), as all the runs of its chain,
    oldest first (``activities.task_history.chain_of``). A listed run that continued as new is not
    fetched: its chain is read from its newest run (when that one is listed too)."""
    from agent_worker.activities.task_history import chain_of
    from temporalio.client import WorkflowExecutionStatus

    async for execution in client.list_workflows(query, limit=limit):
        if execution.status is WorkflowExecutionStatus.CONTINUED_AS_NEW:
            continue
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        yield await chain_of(client, await handle.fetch_history())


async def directory_histories(directory: Path) -> AsyncIterator[WorkflowHistory]:
    """Histories from the ``*.json`` files under ``directory`` (see the module docstring).

    Raises:
        CliError: (exit 2) the directory holds no history file, or a file is not a history.
    """
    from temporalio.client import WorkflowHistory

    for path, workflow_id in _history_files(directory):
        try:
            history = WorkflowHistory.from_json(workflow_id, json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as err:
            raise CliError(f"{path}: not a workflow history in JSON ({err})", 2) from None
        yield history


def _history_files(directory: Path) -> list[tuple[Path, str]]:

    if not directory.is_dir():
        raise CliError(f"--dir {directory}: not a directory", 2)
    files = sorted(p for p in directory.rglob("*.json") if p.name != HISTORY_IDS)
    if not files:
        raise CliError(f"--dir {directory}: no *.json history files under it", 2)
    found = []
    for path in files:
        index = path.parent / HISTORY_IDS
        try:
            ids = json.loads(index.read_text()) if index.exists() else {}
        except ValueError as err:
            raise CliError(f"{index}: not JSON ({err})", 2) from None
        found.append((path, ids.get(path.stem, path.stem)))
    return found


async def cmd_replay(
    args: argparse.Namespace,
    connect: Callable[[], Awaitable[Client]],
    *,
    workflows: Sequence[type] | None = None,
    data_converter: DataConverter | None = None,
    out: TextIO | None = None,
) -> int:
    """Run ``agent-worker replay``; returns the exit code (0 all replay, 1 any does not).

    Args:
        args: The parsed ``replay`` arguments.
        connect: Opens the Temporal client (only called when histories come from the cluster).
        workflows: The workflow classes to replay against (default: ``default_workflows()``).
        data_converter: The payload converter (default: the connected client's, or for ``--dir``
            the one ``AGENT_WORKER_ENCRYPTION_KEYS`` in the environment asks for; ``agent-worker
            replay`` passes the one its configuration asks for).
        out: Where the lines go (default stdout).

    Raises:
        CliError: (exit 2) a usage error: a bad ``--since`` or ``--limit``, ``--dir`` mixed with
            cluster options or holding no history; (exit 1) the cluster refused the query.
    """
    from agent_worker.cli.schedules import parse_interval
    from temporalio.service import RPCError, RPCStatusCode

    out = out or sys.stdout
    workflows = list(workflows) if workflows is not None else default_workflows()
    if args.dir is not None:
        if any(v is not None for v in (args.query, args.since, args.limit)):
            raise CliError("--dir replays files: --query, --since and --limit apply to the cluster only", 2)
        _history_files(args.dir)  # usage errors before any replay output
        if data_converter is None:
            data_converter = _converter_from_env()
        histories = directory_histories(args.dir)
        source = f"history files under {args.dir}"
    else:
        limit = DEFAULT_LIMIT if args.limit is None else args.limit
        if limit < 1:
            raise CliError(f"--limit {limit}: must be at least 1", 2)
        if args.query is not None and not args.query.strip():
            raise CliError("--query is empty", 2)
        since = parse_interval(args.since or DEFAULT_SINCE)
        query = visibility_query(args.query, since, datetime.now(UTC))
        client = await connect()
        data_converter = data_converter or client.data_converter
        histories = cluster_histories(client, query, limit)
        source = f"{client.namespace}: {query} (limit {limit})"
    print(f"replaying {source}", file=out, flush=True)
    try:
        report = await replay_histories(
            histories, workflows=workflows, data_converter=data_converter, out=out
        )
    except RPCError as err:
        # A query the server cannot parse is the caller's mistake; anything else is the cluster's.
        code = 2 if err.status is RPCStatusCode.INVALID_ARGUMENT else 1
        raise CliError(f"cannot list or fetch histories: {err.message}", code) from None
    return report.exit_code


def _converter_from_env() -> DataConverter:
    from agent_worker.security.codec import KeySpecError, converter_from_env

    try:
        return converter_from_env(os.environ)
    except KeySpecError as err:
        raise CliError(str(err), 2) from None


def _workflow_type(history: WorkflowHistory) -> str:
    for event in history.events[:1]:
        if event.HasField("workflow_execution_started_event_attributes"):
            return event.workflow_execution_started_event_attributes.workflow_type.name
    return "?"


def _one_line(err: BaseException) -> str:
    """The failure's reason on one line: the core wraps it in a debug dump of the failure, whose
    first ``message`` is the part a person needs (e.g. ``[TMPRL1100] Nondeterminism error: ...``)."""
    text = str(err) or type(err).__name__
    inner = re.search(r'message: "((?:[^"\\]|\\.)*)"', text)
    return re.sub(r"\s+", " ", inner.group(1) if inner else text).strip()
