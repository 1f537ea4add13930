"""``agent-worker fork`` and ``agent-worker steps``: forks of a task at one of its steps (docs/forks.md).

``steps TASK`` lists a task's steps (its turns) from its history: what each proposed, the commands
and writes that ran after it. ``fork TASK --at STEP`` starts a new task with the original's state
there; the original's committed writes are never repeated. ``events`` shows the fork tree
(``fork_tree``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["fork_tree", "register"]

# Ancestors followed up from a task (a fork of a fork of ...).
MAX_DEPTH = 20


def register(sub: Any) -> None:
    """Add ``fork`` and ``steps``."""
    fork = sub.add_parser("fork", help="start a new task from another's state at one of its steps")
    fork.add_argument(
        "task_id", nargs="?", help="the original (with --history: its name, default the file's stem)"
    )
    fork.add_argument("--at", type=int, required=True, help="the step (turn) the fork begins with")
    fork.add_argument(
        "--history",
        type=Path,
        action="append",
        help="read the original from this exported history JSON (temporal workflow show -o json) "
        "instead of the cluster; once per run for a task of several runs; the fork starts on the "
        "configured task queue",
    )
    change = fork.add_mutually_exclusive_group()
    change.add_argument("--prompt-edit", help="the fork's prompt, in place of the original's")
    change.add_argument("--model", help="run the fork's turns on this model (resolved as an agent's model)")
    change.add_argument("--agent-version", help="run the fork on this registered agent instead")
    fork.add_argument(
        "--replay-until", type=int, help="answer the steps before this one from the original's turns"
    )
    fork.add_argument("--id", help="the fork's task id (default: <task>.fork-<hex>)")
    fork.add_argument("--json", action="store_true")
    fork.set_defaults(handler=cmd_fork)

    steps = sub.add_parser("steps", help="a task's steps (turns): what each proposed and what ran after it")
    steps.add_argument("task_id", nargs="?", help="the task (with --history: its name)")
    steps.add_argument(
        "--history",
        type=Path,
        action="append",
        help="read the steps from this exported history JSON (once per run of the task)",
    )
    steps.add_argument("--json", action="store_true")
    steps.set_defaults(handler=cmd_steps)


async def cmd_fork(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    task_id = _task_id(args)
    store = None
    if args.history is not None:
        from agent_worker.activities.stores.artifacts import build_artifact_store

        store = build_artifact_store(ctx.config)
    tasks = await ctx.tasks(ctx.config.task_queue) if args.history else await ctx.tasks()
    try:
        ref = await tasks.fork(
            task_id,
            at=args.at,
            prompt_edit=args.prompt_edit,
            agent_version=args.agent_version,
            model=args.model,
            replay_until=args.replay_until,
            fork_id=args.id,
            history=args.history,
            store=store,
        )
    except ValueError as err:
        raise CliError(str(err)) from None
    if args.json:
        print(json.dumps({"task_id": ref.task_id, "parent": task_id, "at": args.at}), file=out)
    else:
        print(f"started fork {ref.task_id} of {task_id} at step {args.at}", file=out)
    return 0


def _task_id(args: argparse.Namespace) -> str:
    """The original's id: the argument, else (with ``--history``) the first history file's stem
    (without the ``.runN`` that ``make histories`` gives a task's earlier runs)."""
    if args.task_id:
        return str(args.task_id)
    if not args.history:
        raise CliError("name the task, or give --history FILE", 2)
    return re.sub(r"\.run\d+$", "", args.history[0].stem)


async def cmd_steps(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    tasks = await ctx.tasks()
    try:
        steps = await tasks.steps(_task_id(args), history=args.history)
    except ValueError as err:
        raise CliError(str(err)) from None
    if args.json:
        for step in steps:
            print(step.model_dump_json(), file=out)
        return 0
    print(f"{'STEP':<5} {'STATUS':<18} {'PROPOSED':<40} AFTER IT", file=out)
    for step in steps:
        after = [f"ran: {c}" for c in step.commands] + [f"wrote: {w}" for w in step.writes]
        print(
            f"{step.step:<5} {step.status:<18} {', '.join(step.proposed) or '-':<40} {'; '.join(after)}",
            file=out,
        )
    return 0


async def fork_tree(client: Client, task_id: str) -> list[str]:
    """The fork tree around ``task_id`` (its ancestors, itself, its forks), one line each; empty when
    the task is no fork and has none."""
    from agent_worker.activities.task_history import forks_of, parent_of

    chain: list[tuple[str, int | None]] = [(task_id, None)]
    for _ in range(MAX_DEPTH):
        found = await parent_of(client, chain[0][0])
        if found is None:
            break
        parent, at = found
        chain[0] = (chain[0][0], at)
        chain.insert(0, (parent, None))
    children = await forks_of(client, task_id)
    if len(chain) == 1 and not children:
        return []
    lines = ["fork tree:"]
    for depth, (task, at) in enumerate(chain):
        mark = "" if depth == 0 else "  " * (depth - 1) + "└─ "
        here = "  <- this task" if task == task_id else ""
        lines.append(f"  {mark}{task}{f' (fork at step {at})' if at else ''}{here}")
    for child in children:
        found = await parent_of(client, child)
        at = f" (fork at step {found[1]})" if found else ""
        lines.append(f"  {'  ' * (len(chain) - 1)}└─ {child}{at}")
    return lines
