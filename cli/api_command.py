"""``agent-worker api``: serve the HTTP API (``api``) with uvicorn, until SIGINT/SIGTERM; and
``agent-worker mcp-serve``: chosen agents as MCP tools (``api.mcp_tools``) behind the same door.
Their limits (body size, open streams, CORS origins, Host names, stream tokens, header timeout) are
the ``api_*`` settings (docs/api.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.schemas.visibility import DEFAULT_TASK_QUEUE

if TYPE_CHECKING:
    from agent_worker.api import ApiConfig
    from agent_worker.api.mcp_tools import AgentTool

__all__ = ["register"]

DEFAULT_BIND = "127.0.0.1:8091"
DEFAULT_MCP_BIND = "127.0.0.1:8092"


def register(sub: Any) -> None:
    """Add ``api`` and ``mcp-serve``."""
    api = sub.add_parser("api", help="serve the HTTP API: start, read, decide and follow tasks over HTTP")
    add_serving_arguments(api, DEFAULT_BIND)
    api.set_defaults(handler=cmd_api)
    mcp = sub.add_parser(
        "mcp-serve",
        help="serve chosen agents as MCP tools (Streamable HTTP at /v1/mcp, with the API's auth)",
        description="Each --tool NAME=SPEC.json is an MCP tool: a call starts SPEC's task with the "
        "caller's prompt and answers its result, or the approval it waits for (docs/mcp-serve.md).",
    )
    add_serving_arguments(mcp, DEFAULT_MCP_BIND)
    mcp.add_argument(
        "--tool",
        action="append",
        required=True,
        metavar="NAME=SPEC.json",
        help="an agent tool: its name and the TaskSpec each call starts (repeat for more)",
    )
    mcp.set_defaults(handler=cmd_mcp_serve)


def add_serving_arguments(parser: Any, bind: str) -> None:
    """Where to listen, who may call, and where tasks go (``api`` and ``mcp-serve`` alike)."""
    parser.add_argument("--bind", default=bind, help=f"host:port (default {bind})")
    parser.add_argument("--auth", choices=["token", "header"], default="token")
    parser.add_argument("--tokens", type=Path, help='JSON file {"<token>": "<principal>"} (--auth token)')
    parser.add_argument(
        "--principal-header", default="X-Forwarded-User", help="--auth header: the proxy's header"
    )
    parser.add_argument(
        "--tenants", type=Path, help='JSON file {"<principal>": ["<tenant>", ...]}: who acts where'
    )
    parser.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    parser.add_argument("--keys-dir", type=Path, default=Path.home() / ".agent-worker" / "keys")


def api_config(args: argparse.Namespace, ctx: CliContext) -> ApiConfig:
    """The API's settings from the command's arguments and the ``api_*`` settings.

    Raises:
        CliError: (exit 2) the tokens or tenants file cannot be read.
    """
    from agent_worker.api import ApiConfig
    from agent_worker.inbox import InboxConfigError
    from agent_worker.inbox.auth import Authenticator, load_tokens

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
    settings = ctx.config
    secret = settings.api_stream_token_secret
    return ApiConfig(
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


def _needs_api_extra() -> None:
    try:
        import uvicorn  # noqa: F401

        from agent_worker import api  # noqa: F401
    except ImportError as err:
        raise CliError(f"the HTTP API needs its extra: pip install 'agent-worker[api]' ({err})") from None


async def _serve(app: Any, bind: str, ctx: CliContext) -> int:
    """Serve ``app`` on ``bind`` with uvicorn until SIGINT/SIGTERM."""
    import uvicorn
    from agent_worker.api.serve import server_config

    host, _, port = bind.rpartition(":")
    options = server_config(
        app, host or "127.0.0.1", int(port), ctx.config.api_header_timeout_seconds, log_level="info"
    )
    await uvicorn.Server(options).serve()
    return 0


async def cmd_api(args: argparse.Namespace, ctx: CliContext) -> int:
    _needs_api_extra()
    from agent_worker.activities.stores.state import build_event_sink, build_grant_store, build_stream_backend
    from agent_worker.api import build_api

    config = api_config(args, ctx)
    if not ctx.config.event_sink:  # the configured default sink (data dir or state database)
        config.stored_events = build_event_sink(ctx.config).read_chain  # type: ignore[attr-defined]
    config.streams = build_stream_backend(ctx.config)
    config.grants = build_grant_store(ctx.config)
    return await _serve(build_api(await ctx.temporal(), config), args.bind, ctx)


async def cmd_mcp_serve(args: argparse.Namespace, ctx: CliContext) -> int:
    _needs_api_extra()
    from agent_worker.api.mcp_tools import McpToolError, build_mcp_app

    tools = [_agent_tool(given) for given in args.tool]
    host = args.bind.rpartition(":")[0] or "127.0.0.1"
    try:
        app = build_mcp_app(await ctx.temporal(), api_config(args, ctx), tools, host=host)
    except McpToolError as err:
        raise CliError(str(err), 2) from None
    return await _serve(app, args.bind, ctx)


def _agent_tool(given: str) -> AgentTool:
    """``NAME=SPEC.json`` as an agent tool.

    Raises:
        CliError: (exit 2) naming what is wrong with it.
    """
    from agent_worker.api.mcp_tools import AgentTool, McpToolError
    from agent_worker.schemas.tasks import TaskSpec
    from pydantic import ValidationError

    name, sep, path = given.partition("=")
    if not sep or not name or not path:
        raise CliError(f"--tool {given!r}: write NAME=SPEC.json", 2)
    try:
        spec = TaskSpec.model_validate_json(Path(path).read_text())
        return AgentTool(name=name, spec=spec)
    except OSError as err:
        raise CliError(f"--tool {name}: cannot read {path}: {err}", 2) from None
    except ValidationError as err:
        raise CliError(f"--tool {name}: {path} is not a TaskSpec: {err}", 2) from None
    except McpToolError as err:
        raise CliError(f"--tool {name}: {err}", 2) from None
