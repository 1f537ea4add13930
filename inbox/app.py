"""The inbox's HTTP server: the standard library's ``ThreadingHTTPServer`` in a thread, every request
handed whole to one asyncio event loop (the Temporal client's) with ``run_coroutine_threadsafe``.

The threads only move bytes; routing, authentication, sessions and Temporal calls all run on the
loop, so the session table needs no lock. Routes::

    GET  /                       the viewer's inbox (every request they may decide, with controls)
    GET  /tasks/<id>             one task (refreshes itself while it runs with nothing to decide)
    POST /tasks/<id>/decide      approve / edit / reject (CSRF token; approver checked again)
    GET  /login, POST /login     token mode: the token form (a pre-login cookie and the CSRF token
                                 bound to it), then a session cookie
    POST /logout                 ends the session (CSRF token)
    GET  /healthz                "ok", without authentication

Every response carries a strict Content-Security-Policy (no script at all), ``no-store`` caching
and framing denial. A POST the browser marks as coming from another site (``Sec-Fetch-Site``) is
refused before anything else, the login included (see ``inbox.auth`` for the CSRF tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import signal
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import parse_qs, unquote, urlsplit

import structlog
from temporalio.client import Client

from inbox import pages
from inbox.auth import (
    LOGIN_COOKIE,
    LOGIN_COOKIE_SECONDS,
    Authenticator,
    InboxConfigError,
    Session,
    cookie_header,
    session_id_from,
    well_formed_cookie,
)
from inbox.service import InboxError, InboxService
from schemas.config import ConfigError, WorkerConfig

if TYPE_CHECKING:
    from activities.artifacts import ArtifactStore

log = structlog.get_logger("agent_worker.inbox")

DEFAULT_BIND = "127.0.0.1:8090"
MAX_BODY = 256 * 1024
HANDLER_TIMEOUT = timedelta(seconds=60)
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass
class Request:
    """One HTTP request, as the handler thread read it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes = b""

    def form(self) -> dict[str, str]:
        """The urlencoded form body, one value per field (the last one wins)."""
        fields = parse_qs(self.body.decode("utf-8", "replace"), keep_blank_values=True)
        return {k: v[-1] for k, v in fields.items()}


@dataclass
class Response:
    """What to send back."""

    status: int
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)


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


class InboxApp:
    """Routes requests to pages (runs on the event loop)."""

    def __init__(self, service: InboxService, auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    async def handle(self, request: Request) -> Response:
        """Answer one request; unexpected errors become a 500 page, logged with the cause."""
        try:
            response = await self._route(request)
        except InboxError as err:
            response = Response(err.status, pages.error_page(err.status, str(err)))
        except Exception as err:
            log.exception("inbox request failed", method=request.method, path=request.path)
            response = Response(500, pages.error_page(500, f"the inbox failed on this request: {err}"))
        response.headers = {**SECURITY_HEADERS, **response.headers}
        return response

    async def _route(self, request: Request) -> Response:
        path = urlsplit(request.path).path
        method = request.method
        if path == "/healthz" and method == "GET":
            return Response(200, "ok", {"Content-Type": "text/plain; charset=utf-8"})
        fetched_from = request.headers.get("sec-fetch-site", "").lower()
        if method == "POST" and fetched_from in ("cross-site", "same-site"):
            # The browser says another site sent this form: a CSRF attempt, whatever it carries.
            raise InboxError("a form posted from another site is refused: use the inbox's own pages", 403)
        if path == "/login":
            return self._login(request)
        session, new_cookie = self._session(request)
        if session is None:
            if self.auth.mode == "header":
                raise InboxError(
                    "no principal: requests must come through the proxy that sets "
                    f"{self.auth.principal_header}",
                    401,
                )
            if method == "GET":
                return Response(303, headers={"Location": "/login"})
            raise InboxError("not signed in (or the session expired): sign in again", 401)
        response = await self._signed_in(request, path, session)
        if new_cookie:
            response.headers["Set-Cookie"] = cookie_header(session.session_id)
        return response

    async def _signed_in(self, request: Request, path: str, session: Session) -> Response:
        principal, csrf = session.principal, session.csrf
        if request.method == "POST":
            form = request.form()
            if not self.auth.csrf_ok(session, form.get("csrf")):
                raise InboxError(
                    "the form's CSRF token is missing or wrong: reload the page and try again", 403
                )
        else:
            form = {}
        segments = path.strip("/").split("/") if path.strip("/") else []
        match request.method, segments:
            case "GET", []:
                entries = await self.service.inbox(principal)
                html = pages.inbox_page(principal, csrf, entries, self._previews)
                return Response(200, html)
            case "GET", ["tasks", task_id]:
                view = await self.service.task(unquote(task_id), principal)
                return Response(200, pages.task_page(principal, csrf, view, self._previews))
            case "POST", ["tasks", task_id, "decide"]:
                task_id = unquote(task_id)
                outcome = await self.service.decide(task_id, principal, form)
                log.info(
                    "inbox decision sent",
                    task_id=task_id,
                    request_id=outcome.request_id,
                    principal=principal,
                    decision=form.get("decision"),
                    accepted=outcome.accepted,
                )
                status = 200 if outcome.accepted else 409
                return Response(status, pages.outcome_page(principal, csrf, task_id, outcome))
            case "POST", ["logout"]:
                self.auth.end_session(session.session_id)
                target = "/login" if self.auth.mode == "token" else "/"
                return Response(303, headers={"Location": target, "Set-Cookie": cookie_header("", max_age=0)})
        raise InboxError(f"no page {request.method} {path}", 404)

    def _previews(self, request: Any) -> list[Any]:
        return self.service.previews(request.action)

    def _session(self, request: Request) -> tuple[Session | None, bool]:
        """The request's session, and whether its cookie is new (header mode, where none is kept)."""
        cookie_id = session_id_from(request.headers.get("cookie"))
        if self.auth.mode == "token":
            return self.auth.session(cookie_id), False
        principal = self.auth.principal_from_header(request.headers)
        if principal is None:
            return None, False
        return self.auth.header_session(principal, cookie_id)

    def _login(self, request: Request) -> Response:
        if self.auth.mode != "token":
            return Response(303, headers={"Location": "/"})
        if request.method not in ("GET", "POST"):
            raise InboxError(f"no page {request.method} /login", 404)
        login_cookie = session_id_from(request.headers.get("cookie"), LOGIN_COOKIE)
        if request.method == "GET":
            return self._login_page(200, login_cookie)
        form = request.form()
        if not self.auth.login_csrf_ok(login_cookie, form.get("csrf")):
            log.warning("inbox login refused: no pre-login cookie or a CSRF token not made for it")
            problem = "The sign-in form expired or was not sent from this page; sign in again here."
            return self._login_page(403, None, problem)
        principal = self.auth.principal_for_token(form.get("token", "").strip())
        if principal is None:
            log.warning("inbox login refused: unknown token")
            return self._login_page(401, login_cookie, "That token is not valid.")
        session = self.auth.new_session(principal)
        log.info("inbox login", principal=principal)
        return Response(303, headers={"Location": "/", "Set-Cookie": cookie_header(session.session_id)})

    def _login_page(self, status: int, login_cookie: str | None, problem: str | None = None) -> Response:
        """The login form with its CSRF token, setting the pre-login cookie it is bound to if new."""
        headers = {}
        if not well_formed_cookie(login_cookie):
            login_cookie = secrets.token_urlsafe(32)
            headers["Set-Cookie"] = cookie_header(
                login_cookie, max_age=LOGIN_COOKIE_SECONDS, name=LOGIN_COOKIE, path="/login"
            )
        assert login_cookie is not None
        return Response(status, pages.login_page(problem, csrf=self.auth.login_csrf(login_cookie)), headers)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "agent-worker-inbox"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        self._serve(b"")

    def do_POST(self) -> None:  # noqa: N802
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._send(Response(400, pages.error_page(400, "the request's Content-Length is not a number")))
            self.close_connection = True
            return
        if length > MAX_BODY:
            self._send(Response(413, pages.error_page(413, f"the form is larger than {MAX_BODY} bytes")))
            self.close_connection = True
            return
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        body = self.rfile.read(length)
        if ctype != "application/x-www-form-urlencoded":
            self._send(Response(415, pages.error_page(415, "only HTML form posts are accepted")))
            return
        self._serve(body)

    def _serve(self, body: bytes) -> None:
        request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        future = asyncio.run_coroutine_threadsafe(self.server.app.handle(request), self.server.loop)
        try:
            response = future.result(HANDLER_TIMEOUT.total_seconds())
        except TimeoutError:
            future.cancel()
            response = Response(504, pages.error_page(504, "Temporal did not answer in time; try again"))
        self._send(response)

    def _send(self, response: Response) -> None:
        data = response.body.encode("utf-8")
        self.send_response(response.status)
        headers = {"Content-Type": "text/html; charset=utf-8", **response.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the standard library's name)
        log.debug("inbox http", line=format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], app: InboxApp, loop: asyncio.AbstractEventLoop) -> None:
        import socket

        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.app = app
        self.loop = loop


@contextlib.asynccontextmanager
async def running_inbox(app: InboxApp, bind: str = DEFAULT_BIND) -> AsyncIterator[str]:
    """Serve ``app`` on ``bind`` for the block (port 0 picks a free one); yields the base URL."""
    host, port = parse_bind(bind)
    server = _Server((host, port), app, asyncio.get_running_loop())
    thread = threading.Thread(target=server.serve_forever, name="inbox-http", daemon=True)
    thread.start()
    bound_host, bound_port = server.server_address[:2]
    url_host = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
    try:
        yield f"http://{url_host}:{bound_port}"
    finally:
        # shutdown() waits for serve_forever to return, which may need the loop: never block it.
        await asyncio.to_thread(server.shutdown)
        server.server_close()


def build_app(
    client: Client,
    *,
    auth: str = "token",
    tokens: Path | None = None,
    principal_header: str = "X-Forwarded-User",
    keys_dir: Path | None = None,
    artifact_dir: Path | None = None,
    artifact_store: ArtifactStore | None = None,
) -> InboxApp:
    """An inbox for ``client``'s namespace.

    Raises:
        InboxConfigError: the auth settings are incomplete or the tokens file is unusable.
    """
    from inbox.auth import load_tokens
    from security.signing import DEFAULT_KEY_DIR

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
    return InboxApp(service, authenticator)


async def cmd_inbox_web(
    client: Client, args: Any, out: TextIO | None = None, *, config: WorkerConfig | None = None
) -> int:
    """``agent-worker inbox --web``: serve the approval inbox until SIGINT/SIGTERM (with the
    configuration the CLI read once, else one read from the environment here)."""
    from cli.errors import CliError

    out = out or sys.stdout
    try:
        if config is None:
            config = WorkerConfig.from_env(os.environ, data_dir=getattr(args, "data_dir", None))
        from activities.stores.artifacts import build_artifact_store

        app = build_app(
            client,
            auth=args.auth,
            tokens=args.tokens,
            principal_header=args.principal_header,
            keys_dir=args.keys_dir,
            artifact_store=build_artifact_store(config),
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
    async with running_inbox(app, args.bind) as url:
        who = f"{len(app.auth.principals)} principal(s)" if args.auth == "token" else args.principal_header
        print(f"approval inbox on {url} (auth: {args.auth}, {who}); Ctrl-C stops it", file=out, flush=True)
        await stop.wait()
    return 0
