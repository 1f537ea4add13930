"""``agent-worker api``: serve the HTTP API (``api``) with uvicorn, until SIGINT/SIGTERM. Its limits
(body size, open streams, CORS origins, Host names, stream tokens, header timeout) are the
``api_*`` settings (docs/api.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cli.context import CliContext
from cli.errors import CliError
from schemas.visibility import DEFAULT_TASK_QUEUE

__all__ = ["register"]

DEFAULT_BIND = "127.0.0.1:8091"


def register(sub: Any) -> None:
    """Add ``api``."""
    api = sub.add_parser("api", help="serve the HTTP API: start, read, decide and follow tasks over HTTP")
    api.add_argument("--bind", default=DEFAULT_BIND, help=f"host:port (default {DEFAULT_BIND})")
    api.add_argument("--auth", choices=["token", "header"], default="token")
    api.add_argument("--tokens", type=Path, help='JSON file {"<token>": "<principal>"} (--auth token)')
    api.add_argument(
        "--principal-header", default="X-Forwarded-User", help="--auth header: the proxy's header"
    )
    api.add_argument(
        "--tenants", type=Path, help='JSON file {"<principal>": ["<tenant>", ...]}: who acts where'
    )
    api.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    api.add_argument("--keys-dir", type=Path, default=Path.home() / ".agent-worker" / "keys")
    api.set_defaults(handler=cmd_api)


async def cmd_api(args: argparse.Namespace, ctx: CliContext) -> int:
    try:
        import uvicorn

        from api import ApiConfig, build_api
        from api.serve import server_config
    except ImportError as err:
        raise CliError(f"the HTTP API needs its extra: pip install 'agent-worker[api]' ({err})") from None
    from inbox import InboxConfigError
    from inbox.auth import Authenticator, load_tokens

    try:
        tokens = load_tokens(args.tokens) if args.auth == "token" and args.tokens else None
        auth = Authenticator(args.auth, tokens, principal_header=args.principal_header)
    except InboxConfigError as err:
        raise CliError(str(err), 2) from None
    tenants = None
    if args.tenants is not None:
        try:
            tenants = json.loads(args.tenants.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise CliError(f"--tenants {args.tenants}: {err}", 2) from None
    host, _, port = args.bind.rpartition(":")
    settings = ctx.config
    secret = settings.api_stream_token_secret
    config = ApiConfig(
        auth=auth,
        task_queue=args.task_queue,
        keys_dir=args.keys_dir,
        tenants=tenants,
        max_body_bytes=settings.api_max_body_bytes,
        max_streams=settings.api_max_streams,
        cors_origins=settings.api_cors_origins,
        allowed_hosts=settings.api_allowed_hosts,
        stream_token_seconds=settings.api_stream_token_minutes * 60,
        stream_token_secret=secret.get_secret_value().encode() if secret else None,
    )
    if not ctx.config.event_sink:  # the configured default sink (data dir or state database)
        from activities.stores.state import build_event_sink

        config.stored_events = build_event_sink(ctx.config).read_chain  # type: ignore[attr-defined]
    from activities.stores.state import build_grant_store, build_stream_backend

    config.grants = build_grant_store(ctx.config)

    config.streams = build_stream_backend(ctx.config)
    app = build_api(await ctx.temporal(), config)
    options = server_config(
        app, host or "127.0.0.1", int(port), settings.api_header_timeout_seconds, log_level="info"
    )
    server = uvicorn.Server(options)
    await server.serve()
    return 0
