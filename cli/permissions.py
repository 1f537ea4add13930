"""``agent-worker revoke|grant PRINCIPAL``: the default authorizer's revocation list (in the data dir, or
in PostgreSQL with ``state_backend=postgres``)."""

from __future__ import annotations

import argparse
from typing import Any

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``revoke`` and ``grant``."""
    for verb, text in (("revoke", "revoke a principal's permission"), ("grant", "lift a revocation")):
        p = sub.add_parser(verb, help=f"{text} (the default authorizer's list: data dir or state database)")
        p.set_defaults(verb=verb, handler=cmd_permissions)
        p.add_argument("principal")
        p.add_argument("--tool", default="*", help="one tool's permission (default: every tool)")
        if verb == "revoke":
            p.add_argument(
                "--reason", default="revoked", help="recorded, and shown where it blocks an action"
            )


def cmd_permissions(args: argparse.Namespace, ctx: CliContext) -> int:
    from agent_worker.activities.stores.state import build_authorizer

    config = ctx.config
    if config.authorizer:
        raise CliError(f"permissions live in the configured authorizer ({config.authorizer}), not here")
    authorizer = build_authorizer(config)
    scope = "every tool" if args.tool == "*" else args.tool
    if args.verb == "revoke":
        authorizer.revoke(args.principal, args.tool, args.reason)
        print(f"revoked {args.principal}'s permission for {scope}: approved actions not yet run are blocked")
    elif authorizer.grant(args.principal, args.tool):
        print(f"lifted the revocation of {args.principal} for {scope}")
    else:
        print(f"{args.principal} had no revocation for {scope}")
    return 0
