"""``agent-worker policy simulate``: what a candidate policy would have decided about real runs.

::

    agent-worker policy simulate --policy new.yaml                  # task runs of the last 7 days
    agent-worker policy simulate --policy new.yaml --since 30d --query "AgentTenant = 'acme'"
    agent-worker policy simulate --policy new.yaml tests/histories  # history JSON files or directories
    agent-worker policy simulate --policy new.yaml --json --changed --fail-on-change

The policy file is the ``policy`` of a TaskSpec (``PolicySpec``, JSON Schema
``schemas/jsonschema/policy.schema.json``) in YAML or JSON; a file holding a whole spec (a
``policy:`` key, e.g. ``examples/monthly_report/task.json``) is read for its policy. It is validated
as a task's policy is at start: a rule whose condition does not compile is refused, naming the rule,
and nothing is simulated (exit 2).

Histories come from the cluster through visibility (``--query``, default every ``AgentTask`` run;
``--since``, default 7 days, plus every open run), or from files (``temporal workflow show -o json``,
the test suite's ``tests/histories``). A task that continued as new is read whole, from all its runs
(a listed run that continued as new is read with its newest run, not on its own). Reading them is
all it does: no workflow is started, signalled or updated, no model or tool is called, no store is
read or written (``cli.recorded_actions``, ``cli.policy_diff``).

Output: one line per proposed action (the change, the task, the turn, the tool and arguments, what
became of it, the recorded decision and the candidate's), then a summary: recorded × candidate
counts, and changes by kind. ``--json`` prints the same as one JSON document. Exit code 0, or 1 with
``--fail-on-change`` when any decision would change; 2 on a usage error or a bad policy file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

if TYPE_CHECKING:
    from agent_worker.cli.policy_diff import Simulation
    from agent_worker.schemas.tasks import PolicySpec
    from temporalio.client import WorkflowHistory
    from temporalio.converter import DataConverter

DEFAULT_SINCE = "7d"
DEFAULT_LIMIT = 1000
HISTORY_IDS = "workflow_ids.json"
_ARGS_WIDTH = 40
_ID_WIDTH = 36


def register(sub: Any) -> argparse.ArgumentParser:
    """Add ``policy`` (with its ``simulate`` subcommand) to ``agent-worker``'s subparsers."""
    parser = sub.add_parser("policy", help="work with action policies: simulate a candidate over real runs")
    commands = parser.add_subparsers(dest="policy_command", required=True)
    parser.set_defaults(handler=_handle)  # every subcommand sets its own; this one is never reached
    simulate = commands.add_parser(
        "simulate",
        help="what a candidate policy would have decided about recorded runs (no side effects)",
        description="Run a candidate policy over recorded task histories and report, per proposed "
        "action, what the running policy decided and what the candidate would: allow, approval by "
        "whom, or deny with the reason. Reads histories only: no model call, no write, no workflow "
        "started. Exit 0; 1 with --fail-on-change when a decision would change; 2 on a usage error "
        "or a bad policy file (the rule at fault is named).",
        epilog="example: agent-worker policy simulate --policy new-policy.yaml --since 7d",
    )
    simulate.add_argument(
        "--policy", type=Path, required=True, help="the candidate policy: a TaskSpec's policy, YAML or JSON"
    )
    simulate.add_argument(
        "histories",
        nargs="*",
        type=Path,
        metavar="HISTORY",
        help="history JSON files or directories of them (default: the cluster's runs, see --since)",
    )
    simulate.add_argument(
        "--since",
        help=f"runs started within this long (e.g. 12h, 30d), plus all open runs (default: {DEFAULT_SINCE})",
    )
    simulate.add_argument("--query", help="visibility query choosing the runs (default: every task run)")
    simulate.add_argument(
        "--limit", type=int, help=f"at most this many runs, most recent first (default: {DEFAULT_LIMIT})"
    )
    simulate.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    simulate.add_argument(
        "--changed", action="store_true", help="list only the actions whose decision changes"
    )
    simulate.add_argument(
        "--fail-on-change", action="store_true", help="exit 1 when any decision would change (for CI)"
    )
    simulate.set_defaults(handler=_handle)
    return parser


async def _handle(args: argparse.Namespace, ctx: CliContext) -> int:
    return await cmd_simulate(args, ctx)


def load_policy(path: Path) -> PolicySpec:
    """The candidate policy in ``path``, validated as a task's policy is when the task starts.

    Raises:
        CliError: (exit 2) the file cannot be read or parsed, or the policy is invalid (each problem
            named by its field, e.g. ``policy.rules.1: ... undeclared reference to 'arg'``).
    """
    import yaml
    from agent_worker.schemas.tasks import PolicySpec
    from agent_worker.schemas.validation import describe
    from pydantic import ValidationError

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise CliError(f"--policy {path}: cannot read it ({err.strerror or err})", 2) from None
    except yaml.YAMLError as err:
        raise CliError(f"--policy {path}: not YAML or JSON ({' '.join(str(err).split())})", 2) from None
    if isinstance(data, dict) and isinstance(data.get("policy"), dict):
        data = data["policy"]  # a whole TaskSpec: its policy
    if not isinstance(data, dict):
        raise CliError(f"--policy {path}: a policy is a mapping (rules, default_approvers, ...)", 2)
    try:
        return PolicySpec.model_validate(data)
    except ValidationError as err:
        raise CliError(f"--policy {path}: invalid policy: {describe(err, 'policy')}", 2) from None


@dataclass
class _Source:
    chains: AsyncIterator[list[WorkflowHistory]]  # each task's runs, oldest first
    converter: DataConverter
    name: str


async def cmd_simulate(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    """Run ``agent-worker policy simulate``; returns the exit code.

    Raises:
        CliError: (exit 2) a usage error or a bad policy file; (1) the cluster refused the query.
    """
    from agent_worker.cli.policy_diff import simulate
    from agent_worker.cli.recorded_actions import read_run
    from temporalio.service import RPCError, RPCStatusCode

    out = out or sys.stdout
    started = time.monotonic()
    candidate = load_policy(args.policy)  # before anything else: a bad policy reads nothing
    source = await _source(args, ctx)
    runs = []
    try:
        async for chain in source.chains:
            runs.append(await read_run(chain, source.converter))
    except RPCError as err:
        code = 2 if err.status is RPCStatusCode.INVALID_ARGUMENT else 1
        raise CliError(f"cannot list or fetch histories: {err.message}", code) from None
    result = simulate(candidate, runs)
    elapsed = time.monotonic() - started
    if args.json:
        document = {"policy": str(args.policy), "source": source.name, "elapsed_seconds": round(elapsed, 3)}
        document |= result.to_json()
        if args.changed:
            document["actions"] = [a for a in document["actions"] if a["change"]]
        print(json.dumps(document, indent=2), file=out)
    else:
        print(f"simulating {args.policy} over {source.name}", file=out)
        for line in report_lines(result, changed_only=args.changed):
            print(line, file=out)
        print(f"simulated in {elapsed:.2f} s", file=out)
    return 1 if args.fail_on_change and result.changed else 0


async def _source(args: argparse.Namespace, ctx: CliContext) -> _Source:
    from agent_worker.cli.recorded_actions import events_read
    from agent_worker.cli.replay import cluster_chains, visibility_query
    from agent_worker.cli.schedules import parse_interval

    if args.histories:
        if any(v is not None for v in (args.query, args.since, args.limit)):
            raise CliError(
                "history files are read as given: --query, --since and --limit apply to the cluster", 2
            )
        from agent_worker.security.codec import KeySpecError, converter_for

        files = history_files(args.histories)  # usage errors before any output
        try:
            converter = converter_for(ctx.config)
        except KeySpecError as err:
            raise CliError(str(err), 2) from None
        return _Source(file_chains(files, events_read), converter, f"{len(files)} history files")
    limit = DEFAULT_LIMIT if args.limit is None else args.limit
    if limit < 1:
        raise CliError(f"--limit {limit}: must be at least 1", 2)
    if args.query is not None and not args.query.strip():
        raise CliError("--query is empty", 2)
    query = visibility_query(
        args.query, parse_interval(args.since or DEFAULT_SINCE, "--since"), datetime.now(UTC)
    )
    client = await ctx.temporal()
    name = f"{client.namespace}: {query} (limit {limit})"
    return _Source(cluster_chains(client, query, limit), client.data_converter, name)


def history_files(paths: list[Path]) -> list[tuple[Path, str]]:
    """Each history file among ``paths`` (a directory stands for the ``*.json`` files under it) with
    its workflow id: from a ``workflow_ids.json`` beside it, else its file name.

    Raises:
        CliError: (exit 2) a path does not exist, or no history file was given.
    """
    found: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.json") if p.name != HISTORY_IDS)
        elif path.is_file():
            files = [path] if path.name != HISTORY_IDS else []
        else:
            raise CliError(f"{path}: no such file or directory", 2)
        for file in files:
            index = file.parent / HISTORY_IDS
            try:
                ids = json.loads(index.read_text()) if index.exists() else {}
            except ValueError as err:
                raise CliError(f"{index}: not JSON ({err})", 2) from None
            found.append((file, ids.get(file.stem, file.stem) if isinstance(ids, dict) else file.stem))
    if not found:
        raise CliError(f"no *.json history files under {', '.join(map(str, paths))}", 2)
    return found


async def file_chains(
    files: list[tuple[Path, str]], cut: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> AsyncIterator[list[WorkflowHistory]]:
    """The runs in ``files`` (as ``temporal workflow show -o json`` writes them, one run a file) put
    together into chains, each oldest first (``activities.task_history.chains_in``): the files of
    one workflow id are read together, one id at a time. A chain whose earlier runs are not among
    the files begins at its earliest run that is. ``cut``: applied to each file's JSON before it is
    parsed (``recorded_actions.events_read``).

    Raises:
        CliError: (exit 2) a file is not a workflow history in JSON.
    """
    from agent_worker.activities.task_history import chains_in

    by_id: dict[str, list[Path]] = {}
    for path, workflow_id in files:
        by_id.setdefault(workflow_id, []).append(path)
    for workflow_id, paths in by_id.items():
        for chain in chains_in([_history_file(path, workflow_id, cut) for path in paths]):
            yield chain


def _history_file(
    path: Path, workflow_id: str, cut: Callable[[dict[str, Any]], dict[str, Any]] | None
) -> WorkflowHistory:
    from temporalio.client import WorkflowHistory

    try:
        data = json.loads(path.read_text())
        return WorkflowHistory.from_json(workflow_id, cut(data) if cut and isinstance(data, dict) else data)
    except (ValueError, KeyError, TypeError) as err:
        raise CliError(f"{path}: not a workflow history in JSON ({err})", 2) from None


def report_lines(result: Simulation, changed_only: bool = False) -> list[str]:
    """The per-action table, then the summary, for people."""
    rows = [
        [
            a.change or "-",
            _cut(a.workflow_id, _ID_WIDTH),
            str(a.turn),
            a.tool,
            _cut(json.dumps(a.arguments, sort_keys=True, separators=(",", ":")), _ARGS_WIDTH),
            a.outcome + (" (!)" if a.inconsistent else ""),
            a.recorded.label(),
            a.candidate.label(),
        ]
        for a in result.actions
        if a.change or not changed_only
    ]
    lines = _table(["CHANGE", "TASK", "TURN", "TOOL", "ARGUMENTS", "OUTCOME", "RECORDED", "CANDIDATE"], rows)
    summary = result.summary()
    noun = "run" if summary["runs"] == 1 else "runs"
    lines += [
        "",
        f"{summary['runs']} {noun}, {summary['actions']} actions: {summary['changed']} would change "
        f"({summary['skipped']} {_plural(summary['skipped'], 'run')} skipped, {summary['inconsistent']} "
        f"{_plural(summary['inconsistent'], 'action')} inconsistent with their history)",
    ]
    if not summary["actions"]:
        lines.append("nothing to compare: no proposed action in these runs")
        return lines + _skipped_lines(result)
    matrix = summary["matrix"]
    verdicts = list(matrix)
    lines += [""] + _table(
        ["RECORDED \\ CANDIDATE", *verdicts],
        [[old, *(str(matrix[old][new]) for new in verdicts)] for old in verdicts],
    )
    if summary["by_kind"]:
        lines += ["", "changes by kind:"] + [f"  {kind:<40} {n}" for kind, n in summary["by_kind"].items()]
    if summary["inconsistent"]:
        lines.append(
            "(!) the history's outcome disagrees with its policy as this code evaluates it: the run was "
            "decided by code that evaluated differently"
        )
    return lines + _skipped_lines(result)


def _skipped_lines(result: Simulation) -> list[str]:
    if not result.skipped:
        return []
    return ["", "skipped:"] + [f"  {w} {r}: {why}" for w, r, why in result.skipped]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]
    ]


def _plural(count: int, noun: str) -> str:
    return noun if count == 1 else f"{noun}s"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


__all__ = ["cmd_simulate", "file_chains", "history_files", "load_policy", "register", "report_lines"]
