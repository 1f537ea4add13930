"""``agent-worker grants list|revoke``: remembered grants in the state store (the data dir, or
PostgreSQL with ``state_backend=postgres``); and ``approve --remember``'s options.

A grant is made only by a task that accepted an approve-and-remember (``agent-worker approve ...
--remember``), never here: this command lists them and revokes them. A revoked grant answers no
later action (the next one asks a person again).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

__all__ = ["add_remember_arguments", "register", "remember_from"]

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def register(sub: Any) -> None:
    """Add ``grants list`` and ``grants revoke``."""
    grants = sub.add_parser("grants", help="list or revoke remembered grants (approve --remember makes them)")
    grants.set_defaults(handler=cmd_grants)
    verbs = grants.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="the active grants (--all: revoked and void ones too)")
    listing.add_argument("--tenant", help="one tenant's grants only")
    listing.add_argument("--all", action="store_true", help="revoked and void grants too")
    listing.add_argument("--json", action="store_true", help="JSON, one object per grant")
    listing.set_defaults(handler=cmd_grants)
    revoke = verbs.add_parser("revoke", help="revoke a grant: the next matching action asks again")
    revoke.add_argument("grant_id")
    revoke.add_argument("--as", dest="principal", required=True, help="who revokes it (recorded)")
    revoke.add_argument("--reason", default="revoked", help="recorded with the grant")
    revoke.set_defaults(handler=cmd_grants)


def cmd_grants(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    from agent_worker.activities.stores.state import build_grant_store

    out = out or sys.stdout
    store = build_grant_store(ctx.config)
    if args.verb == "revoke":
        if not store.end(args.grant_id, "revoked", args.reason, by=args.principal):
            grant = store.get(args.grant_id)
            if grant is None:
                raise CliError(f"no grant {args.grant_id!r}")
            raise CliError(f"grant {args.grant_id} is {grant.status} already ({grant.status_reason})")
        print(f"revoked {args.grant_id}: the next matching action asks for approval again", file=out)
        return 0
    found = store.listed(args.tenant, ended=args.all)
    if args.json:
        for grant in found:
            print(json.dumps(grant.model_dump(mode="json"), sort_keys=True), file=out)
        return 0
    if not found:
        print("no grants", file=out)
    for grant in found:
        remember = grant.remember
        scope = {"agent": f"agent {grant.agent}", "thread": f"thread {grant.thread}", "tenant": "tenant"}
        line = (
            f"{grant.grant_id}  {grant.status:<7} {grant.tenant}/{grant.tool} by {grant.principal}, "
            f"for {scope[remember.scope]}"
        )
        if remember.when:
            line += f", when {remember.when}"
        if remember.until:
            line += f", until {remember.until.isoformat()}"
        if grant.status != "active":
            line += f" ({grant.status_reason})"
        print(line, file=out)
    return 0


def add_remember_arguments(parser: argparse.ArgumentParser) -> None:
    """``approve``'s options for approve-and-remember."""
    parser.add_argument(
        "--remember",
        action="store_true",
        help="approve and remember: later matching actions are approved without asking (policy.grants)",
    )
    parser.add_argument(
        "--scope",
        choices=["agent", "thread", "tenant"],
        default="agent",
        help="--remember: for the task's agent (default), its thread, or its whole tenant",
    )
    parser.add_argument(
        "--when", help="--remember: a CEL condition later actions must meet, e.g. 'args.amount <= 500'"
    )
    parser.add_argument("--until", help="--remember: until this time (ISO 8601) or for a while (30m, 8h, 7d)")


def remember_from(args: argparse.Namespace, now: datetime | None = None) -> dict[str, Any]:
    """The decision's ``remember`` field from ``approve``'s options ({} without ``--remember``).

    Raises:
        CliError: ``--scope``/``--when``/``--until`` without ``--remember``, or a bad ``--until``.
    """
    if not getattr(args, "remember", False):
        if getattr(args, "when", None) or getattr(args, "until", None):
            raise CliError("--when and --until go with --remember", 2)
        return {}
    remember: dict[str, Any] = {"scope": args.scope}
    if args.when:
        remember["when"] = args.when
    if args.until:
        match = _DURATION.match(args.until)
        if match:
            seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            remember["until"] = ((now or datetime.now(UTC)) + timedelta(seconds=seconds)).isoformat()
        else:
            try:
                until = datetime.fromisoformat(args.until)
            except ValueError:
                raise CliError(
                    f"--until {args.until!r}: an ISO 8601 time or a duration (30m, 8h, 7d)", 2
                ) from None
            if until.tzinfo is None:
                raise CliError(f"--until {args.until!r}: give a time zone (e.g. Z or +01:00)", 2)
            remember["until"] = until.isoformat()
    return {"remember": remember}
