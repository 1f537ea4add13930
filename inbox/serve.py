"""Serving the inbox: ``build_app`` (an ``InboxApp`` from the CLI's settings), ``serving`` (alias
``running_inbox``: uvicorn on the caller's event loop, for as long as a block runs; for any ASGI app,
the HTTP API's too) and ``agent-worker inbox --web``."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import uvicorn
from agent_worker.inbox.app import InboxApp
from agent_worker.inbox.auth import Authenticator, InboxConfigError, load_tokens
from agent_worker.inbox.service import InboxService
from agent_worker.schemas.config import ConfigError, WorkerConfig
from temporalio.client import Client

if TYPE_CHECKING:
    from agent_worker.activities.artifacts import ArtifactStore
    from agent_worker.activities.grants import GrantStore
    from agent_worker.activities.stores.streams import StreamBackend

DEFAULT_BIND = "127.0.0.1:8090"
# How long stopping waits for open responses (a live stream runs as long as its task) before it
# cancels them.
SHUTDOWN_GRACE_SECONDS = 2


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8090``, ``:8090`` for all interfaces) as (host, port).

    Raises:
        InboxConfigError: not ``host:port`` with a port in 0..65535.
    """
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise InboxConfigError(f"--bind must be host:port, e.g. {DEFAULT_BIND}; got {bind!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: whoever runs the inbox owns SIGINT and SIGTERM
    (the CLI stops it through its own; a test's loop keeps its own)."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


@contextlib.asynccontextmanager
async def serving(app: Any, bind: str = DEFAULT_BIND) -> AsyncIterator[str]:
    """Serve the ASGI application ``app`` (the inbox's, or the HTTP API's) on ``bind`` for the
    block (port 0 picks a free one); yields the base URL.

    Raises:
        InboxConfigError: ``bind`` is not ``host:port``.
        OSError: the address cannot be bound (bound here, so the caller sees why).
    """
    host, port = parse_bind(bind)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,  # the process's logging stays as it was configured
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    server = _Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                serving.result()
                raise OSError(f"the inbox did not start on {bind}")
            await asyncio.sleep(0.02)
        bound_host, bound_port = sock.getsockname()[:2]
        url_host = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
        yield f"http://{url_host}:{bound_port}"
    finally:
        server.should_exit = True
        await serving
        sock.close()


# The inbox's callers (tests, the CLI) know it by this name.
running_inbox = serving


def build_app(
    client: Client,
    *,
    auth: str = "token",
    tokens: Path | None = None,
    principal_header: str = "X-Forwarded-User",
    keys_dir: Path | None = None,
    artifact_dir: Path | None = None,
    artifact_store: ArtifactStore | None = None,
    streams: StreamBackend | None = None,
    grants: GrantStore | None = None,
) -> InboxApp:
    """An inbox for ``client``'s namespace (``streams``: the workers' stream backend, for the task
    pages' live stream).

    Raises:
        InboxConfigError: the auth settings are incomplete or the tokens file is unusable.
    """
    from agent_worker.security.signing import DEFAULT_KEY_DIR

    if auth == "token" and tokens is None:
        raise InboxConfigError(
            "--auth token needs --tokens FILE (a JSON object mapping tokens to principals)"
        )
    authenticator = Authenticator(
        auth,
        tokens=load_tokens(tokens) if auth == "token" and tokens else None,
        principal_header=principal_header,
    )
    service = InboxService(
        client, keys_dir=keys_dir or DEFAULT_KEY_DIR, artifact_dir=artifact_dir, artifact_store=artifact_store
    )
    return InboxApp(service, authenticator, streams, grants=grants)


async def cmd_inbox_web(
    client: Client, args: Any, out: TextIO | None = None, *, config: WorkerConfig | None = None
) -> int:
    """``agent-worker inbox --web``: serve the approval inbox until SIGINT/SIGTERM (with the
    configuration the CLI read once, else one read from the environment here)."""
    from agent_worker.cli.errors import CliError

    out = out or sys.stdout
    try:
        if config is None:
            config = WorkerConfig.from_env(os.environ, data_dir=getattr(args, "data_dir", None))
        from agent_worker.activities.stores.artifacts import build_artifact_store
        from agent_worker.activities.stores.state import build_grant_store, build_stream_backend

        app = build_app(
            client,
            auth=args.auth,
            tokens=args.tokens,
            principal_header=args.principal_header,
            keys_dir=args.keys_dir,
            artifact_store=build_artifact_store(config),
            streams=build_stream_backend(config),
            grants=build_grant_store(config),
        )
        host, _ = parse_bind(args.bind)
    except (InboxConfigError, ConfigError) as err:
        raise CliError(str(err), 2) from None
    if args.auth == "header" and not _is_loopback(host):
        print(
            f"warning: header auth trusts {args.principal_header} from anyone who reaches {args.bind}; "
            "only the reverse proxy may reach it",
            file=sys.stderr,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    who = f"{len(app.auth.principals)} principal(s)" if args.auth == "token" else args.principal_header
    try:
        async with running_inbox(app, args.bind) as url:
            live = "live stream on" if app.streams is not None else "no live stream"
            print(
                f"approval inbox on {url} (auth: {args.auth}, {who}; {live}); Ctrl-C stops it",
                file=out,
                flush=True,
            )
            await stop.wait()
    except OSError as err:
        raise CliError(f"cannot serve the inbox on {args.bind}: {err}", 2) from None
    return 0


__all__ = ["DEFAULT_BIND", "build_app", "cmd_inbox_web", "parse_bind", "running_inbox", "serving"]
