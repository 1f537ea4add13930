"""Sandbox commands: ``sandbox-image`` (build the default image) and ``reap`` (remove orphans, now or
on a Temporal Schedule)."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import Any, TextIO

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.cli.schedules import parse_interval, upsert_schedule
from agent_worker.schemas.sandbox import ReapInput
from temporalio.client import Client

REAPER_SCHEDULE_ID = "agent-worker-reaper"


def register(sub: Any) -> None:
    """Add ``sandbox-image`` and ``reap``."""
    image = sub.add_parser("sandbox-image", help="build the default Docker sandbox image locally (cached)")
    image.add_argument("--tag", help="default: AGENT_WORKER_DOCKER_IMAGE or agent-worker-sandbox:bookworm")
    image.add_argument("--rebuild", action="store_true")
    image.set_defaults(handler=cmd_sandbox_image)

    reap = sub.add_parser("reap", help="remove sandboxes whose task is closed or unknown")
    reap.add_argument("--min-age", default="10m", help="never touch younger sandboxes (default 10m)")
    reap.add_argument("--dry-run", action="store_true", help="say what would be removed")
    reap.add_argument("--schedule", metavar="EVERY", help="instead, run it on a Temporal Schedule, e.g. 15m")
    reap.set_defaults(handler=cmd_reap)


def cmd_sandbox_image(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    from agent_worker.cli.sandbox_image import ImageBuildError, build_image

    out = out or sys.stdout
    config = ctx.config
    try:
        print(build_image(args.tag or config.docker_image, rebuild=args.rebuild), file=out)
    except ImageBuildError as err:
        raise CliError(str(err)) from None
    return 0


async def cmd_reap(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    reap = ReapInput(min_age_seconds=parse_interval(args.min_age).total_seconds(), dry_run=args.dry_run)
    config = ctx.config
    client = await ctx.temporal()
    if args.schedule:
        await schedule_reaper(client, config.task_queue, parse_interval(args.schedule), reap)
        print(
            f"schedule {REAPER_SCHEDULE_ID} runs the reaper every {args.schedule} on {config.task_queue}",
            file=out,
        )
        return 0
    from agent_worker.activities.sandbox.reaper import SandboxReaper

    from agent_worker.worker import build_sandboxes

    backends, _default, _unavailable = build_sandboxes(config, client.namespace)
    result = await SandboxReaper(list(backends.values()), client).reap(reap)
    verb = "would remove" if reap.dry_run else "removed"
    for removed in result.removed:
        print(f"{verb} {removed.backend.value} sandbox {removed.sandbox_id}: {removed.reason}", file=out)
    print(f"{verb} {len(result.removed)}, kept {result.kept}", file=out)
    return 0


async def schedule_reaper(client: Client, task_queue: str, every: timedelta, reap: ReapInput) -> None:
    """Create (or update) the Temporal Schedule that starts ``SandboxReaper`` every ``every``."""
    from agent_worker.workflows import SandboxReaperWorkflow

    await upsert_schedule(
        client, REAPER_SCHEDULE_ID, SandboxReaperWorkflow.run, reap, task_queue=task_queue, every=every
    )
