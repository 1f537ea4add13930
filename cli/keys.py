"""``agent-worker keys new|show PRINCIPAL``: Ed25519 keys for signed approvals."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``keys``."""
    keys = sub.add_parser("keys", help="Ed25519 keys for signed approvals")
    keys.add_argument("action", choices=["new", "show"])
    keys.add_argument("principal")
    keys.add_argument("--keys-dir", type=Path, help="default ~/.agent-worker/keys")
    keys.set_defaults(handler=cmd_keys)


def cmd_keys(args: argparse.Namespace, _ctx: CliContext | None = None) -> int:
    from agent_worker.security.signing import (
        DEFAULT_KEY_DIR,
        load_private_key,
        new_private_key,
        public_key_text,
    )

    key_dir = args.keys_dir or DEFAULT_KEY_DIR
    if args.action == "new":
        key = new_private_key(args.principal, key_dir)
        print(f"private key: {key_dir / (args.principal + '.key')} (keep it; mode 0600)")
    else:
        try:
            key = load_private_key(args.principal, key_dir)
        except (OSError, ValueError) as err:
            raise CliError(
                f"no usable key for {args.principal} in {key_dir} ({err}); "
                f"make one with: agent-worker keys new {args.principal}",
                2,
            ) from None
    print(f"public key for {args.principal}: {public_key_text(key)}")
    print(f'register it in the task policy: "signers": {{"{args.principal}": "{public_key_text(key)}"}}')
    return 0
