"""``agent-worker worker``: run a worker (its roles, task queue and health endpoint from the
configuration, which these options override)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent_worker.cli.context import CliContext
from agent_worker.schemas.visibility import DEFAULT_TASK_QUEUE

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``worker``."""
    worker = sub.add_parser("worker", help="run a worker until SIGINT/SIGTERM")
    worker.add_argument("--task-queue", help=f"default: AGENT_WORKER_TASK_QUEUE or {DEFAULT_TASK_QUEUE}")
    worker.add_argument("--data-dir", type=Path, help="default: AGENT_WORKER_DATA_DIR or .agent-worker")
    worker.add_argument(
        "--role",
        action="append",
        choices=["all", "workflows", "agent", "sandbox", "business"],
        help="what to run (repeatable; default: AGENT_WORKER_ROLES or all): workflows, agent turns, "
        "sandbox commands, business writes, each on its own task queue",
    )
    worker.add_argument(
        "--health", metavar="HOST:PORT", help="serve GET /healthz here (AGENT_WORKER_HEALTH_BIND)"
    )
    worker.set_defaults(handler=cmd_worker, config_overrides=_overrides)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "task_queue": args.task_queue,
        "data_dir": args.data_dir,
        "roles": args.role,
        "health_bind": args.health,
    }


async def cmd_worker(args: argparse.Namespace, ctx: CliContext) -> int:
    """Run until SIGINT/SIGTERM with the configuration ``cli.main`` read."""
    from agent_worker.worker import run_worker

    await run_worker(ctx.config, client_overrides={"target_host": ctx.address, "namespace": ctx.namespace})
    return 0
