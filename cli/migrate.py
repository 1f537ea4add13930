"""``agent-worker migrate``: create or update the state database's tables (``state_backend=postgres``).

Idempotent and safe to run from several places at once (an advisory lock serializes it). Workers
also apply missing migrations at start; run this command where the workers' database role may not
create tables, or to prepare the database before the fleet starts.
"""

from __future__ import annotations

import argparse
from typing import Any

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``migrate``."""
    p = sub.add_parser(
        "migrate", help="create or update the state database's tables (state_backend=postgres)"
    )
    p.set_defaults(handler=cmd_migrate)


def cmd_migrate(args: argparse.Namespace, ctx: CliContext) -> int:
    from agent_worker.activities.errors import StateUnavailable
    from agent_worker.activities.stores.state import migrate_state

    config = ctx.config
    if config.state_backend != "postgres":
        print(
            "state_backend is local: its files and SQLite tables are created on first use; nothing to migrate"
        )
        return 0
    try:
        applied = migrate_state(config)
    except StateUnavailable as err:
        raise CliError(f"cannot migrate the state database: {err}", 1) from None
    from agent_worker.activities.stores.postgres_db import LATEST

    if applied:
        print(f"applied migrations {', '.join(map(str, applied))}: the state database is at version {LATEST}")
    else:
        print(f"the state database is up to date (version {LATEST})")
    return 0
