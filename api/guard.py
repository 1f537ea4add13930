"""The HTTP API's door: what every request passes before a route (or a body parser) sees it.

In this order, as an ASGI middleware around the FastAPI application:

1. **Host** (header mode): a ``Host`` other than loopback, ``localhost`` or ``api_allowed_hosts`` is
   refused with 421 (``security.hosts``: DNS rebinding cannot ride on the proxy's trust).
2. **CORS**: a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an origin of
   ``api_cors_origins`` is answered 204 with what the API allows; from any other origin, 403. Every
   answer to an allowed origin carries ``Access-Control-Allow-Origin`` (never credentials: browsers
   authenticate with a bearer or stream token, never a cookie).
3. **Who** (every ``/v1/`` route): a bearer token (token mode) or the proxy's header (header mode);
   on ``GET /v1/tasks/{id}/events`` and ``/stream`` also a stream token (``?access_token=``, made for
   that task: ``api.stream_tokens``). Else 401, before a byte of the body is read.
4. **A POST's body**: it must come from the same site or an allowed origin (``Sec-Fetch-Site``,
   403), be JSON (``Content-Type: application/json``, 415) and hold at most ``api_max_body_bytes``
   (413, by its ``Content-Length`` before reading, or as its chunks arrive). It is read here, whole
   and bounded, and handed to the route.
5. **Streams**: a principal holds at most ``api_max_streams`` event streams at once (429); an AG-UI
   run (``POST /v1/agui``) is one.

The principal found is passed to the routes in the ASGI scope (``PRINCIPAL``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from agent_worker.api.stream_tokens import StreamTokens, stream_route
from agent_worker.security.hosts import host_allowed

if TYPE_CHECKING:
    from agent_worker.inbox.auth import Authenticator
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The scope key the routes read the caller's principal from.
PRINCIPAL = "agent_worker.principal"
ALLOWED_METHODS = "GET, POST"
ALLOWED_HEADERS = "Authorization, Content-Type, Last-Event-ID"
PREFLIGHT_MAX_AGE = "600"
# The AG-UI endpoint (``api.agui``): a POST whose answer is a stream.
AGUI_PATH = "/v1/agui"


class Guard:
    """The checks of the module docstring around ``app``.

    Args:
        app: The API's ASGI application.
        auth: The inbox's authenticator (token or header mode).
        tokens: Checks stream tokens.
        max_body: The largest body read, in bytes.
        max_streams: Event streams one principal may hold open.
        cors_origins: Origins allowed cross-origin (exact).
        allowed_hosts: Header mode: ``Host`` names answered besides loopback.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        auth: Authenticator,
        tokens: StreamTokens,
        max_body: int,
        max_streams: int,
        cors_origins: list[str],
        allowed_hosts: list[str],
    ) -> None:
        self.app = app
        self.auth = auth
        self.tokens = tokens
        self.max_body = max_body
        self.max_streams = max_streams
        self.cors_origins = set(cors_origins)
        self.allowed_hosts = list(allowed_hosts)
        self.streams: Counter[str] = Counter()  # open event streams per principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        allowed_origin = origin if origin in self.cors_origins else None
        if allowed_origin is not None:
            send = _with_cors(send, allowed_origin)
        if self.auth.mode == "header" and not host_allowed(headers.get("host"), self.allowed_hosts):
            await _answer(send, 421, "this API answers only requests addressed to its own name (Host)")
            return
        method, path = scope["method"], scope["path"]
        if method == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(send, allowed_origin)
            return
        if not path.startswith("/v1/"):  # /healthz, /openapi.json, /docs
            await self.app(scope, receive, send)
            return
        who = self._principal(scope, headers)
        if who is None:
            await _answer(
                send, 401, "sign in: a bearer token (or the proxy's header)", {"WWW-Authenticate": "Bearer"}
            )
            return
        scope = {**scope, PRINCIPAL: who}
        if method == "POST":
            body = await self._body(headers, receive, send, allowed_origin is not None)
            if body is None:
                return
            receive = _replay(body, receive)
        if stream_route(method, path) is None and (method, path) != ("POST", AGUI_PATH):
            await self.app(scope, receive, send)
            return
        if self.streams[who] >= self.max_streams:
            await _answer(send, 429, f"{who!r} holds {self.max_streams} open streams already; close one")
            return
        self.streams[who] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.streams[who] -= 1
            if not self.streams[who]:
                del self.streams[who]

    def _principal(self, scope: Scope, headers: dict[str, str]) -> str | None:
        if self.auth.mode == "header":
            found = self.auth.principal_from_header(headers)
        else:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            found = self.auth.principal_for_token(token.strip()) if scheme.lower() == "bearer" else None
        if found is not None:
            return found
        task_id = stream_route(scope["method"], scope["path"])
        if task_id is None:
            return None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = query.get("access_token", [""])[-1]
        return self.tokens.principal(given, task_id) if given else None

    async def _body(
        self, headers: dict[str, str], receive: Receive, send: Send, allowed_origin: bool
    ) -> bytes | None:
        """The POST's body, read whole when it passes; None when it was refused (and answered)."""
        if headers.get("sec-fetch-site") in ("cross-site", "same-site") and not allowed_origin:
            # A bearer token is never sent by a browser on its own; the trusted header may be: a POST
            # from a page on another site must not ride on it.
            await _answer(send, 403, "cross-site requests are refused (see api_cors_origins)")
            return None
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            await _answer(send, 415, "a POST must be JSON (Content-Type: application/json)")
            return None
        length = headers.get("content-length")
        if length is not None and not length.isdigit():
            await _answer(send, 400, "the request's Content-Length is not a number")
            return None
        too_large = f"the body is larger than {self.max_body} bytes (api_max_body_bytes)"
        if length is not None and int(length) > self.max_body:
            await _answer(send, 413, too_large)
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _answer(send, 413, too_large)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _preflight(self, send: Send, allowed_origin: str | None) -> None:
        if allowed_origin is None:
            await _answer(send, 403, "this origin may not call the API (api_cors_origins)")
            return
        await send(
            {
                "type": "http.response.start",
                "status": 204,
                "headers": [
                    (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
                    (b"access-control-allow-headers", ALLOWED_HEADERS.encode()),
                    (b"access-control-max-age", PREFLIGHT_MAX_AGE.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _with_cors(send: Send, origin: str) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            extra = [(b"access-control-allow-origin", origin.encode()), (b"vary", b"Origin")]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read already, then waits on the connection (a disconnect)."""
    sent = False

    async def receiving() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receiving


async def _answer(send: Send, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    """A JSON error answer, as FastAPI gives (``{"detail": ...}``). The connection closes after it:
    a body the request may still be sending is never read."""
    body = json.dumps({"detail": detail}).encode()
    sent = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    sent += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": sent})
    await send({"type": "http.response.body", "body": body})


__all__ = ["AGUI_PATH", "PRINCIPAL", "Guard"]
