"""A local stand-in for the E2B REST API's sandbox lifecycle endpoints, for tests.

It serves the request and response shapes of the SDK's generated client (``e2b/api/client``):

- ``POST /v2/sandboxes``: create (201 ``Sandbox``); a repeated ``Idempotency-Key`` returns the sandbox
  the first request created, while that sandbox exists;
- ``GET /v2/sandboxes``: list (200 ``[ListedSandbox]``), filtered by ``metadata`` (the SDK sends an
  urlencoded ``k=v&...`` string whose keys and values are percent-encoded once more) and ``state``,
  paged by ``limit`` / ``nextToken`` with an ``x-next-token`` header;
- ``GET /sandboxes/{id}``: detail (200 ``SandboxDetail``);
- ``POST /v2/sandboxes/{id}/connect``: connect, resuming a paused sandbox (200/201 ``Sandbox``);
- ``DELETE /sandboxes/{id}``: kill (204, or 404 when unknown).

Every request must carry the ``X-API-KEY`` the stand-in was made with (else 401, as the real API).
Every request is recorded with its headers and body; ``fail_next`` scripts error answers,
``page_size`` sets the default page length and ``list_delay`` holds list answers back (to make
concurrent creates race past their look-ups). The in-sandbox daemon (envd: commands and files) is
not part of it.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote, urlsplit

ENVD_VERSION = "0.4.0"
_IDEMPOTENCY_KEY = re.compile(r"[a-z0-9-]{1,255}")


@dataclass
class Recorded:
    """One request as the stand-in received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: Any


@dataclass
class StoredSandbox:
    sandbox_id: str
    template_id: str
    metadata: dict[str, str]
    started_at: datetime
    timeout: int
    allow_internet_access: bool | None
    auto_pause: bool
    state: str = "running"
    access_token: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def end_at(self) -> datetime:
        return self.started_at + timedelta(seconds=self.timeout)

    def created(self) -> dict[str, Any]:
        """The ``Sandbox`` shape (create, connect)."""
        return {
            "templateID": self.template_id,
            "sandboxID": self.sandbox_id,
            "clientID": "standin",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.access_token,
        }

    def listed(self) -> dict[str, Any]:
        """The ``ListedSandbox`` shape."""
        return {
            "templateID": self.template_id,
            "sandboxID": self.sandbox_id,
            "clientID": "standin",
            "startedAt": self.started_at.isoformat(),
            "endAt": self.end_at.isoformat(),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "state": self.state,
            "envdVersion": ENVD_VERSION,
            "metadata": self.metadata,
        }

    def detail(self) -> dict[str, Any]:
        """The ``SandboxDetail`` shape."""
        detail = self.listed()
        detail["envdAccessToken"] = self.access_token
        if self.allow_internet_access is not None:
            detail["allowInternetAccess"] = self.allow_internet_access
        return detail


class E2BStandIn:
    """The stand-in server, on 127.0.0.1 and a free port, in a background thread."""

    def __init__(self, api_key: str = "e2b_standin_key") -> None:
        self.api_key = api_key
        self.requests: list[Recorded] = []
        self.sandboxes: dict[str, StoredSandbox] = {}
        self.idempotency_keys: dict[str, str] = {}
        self.page_size = 100
        self.list_delay = 0.0
        self._faults: list[tuple[int, str]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="e2b-standin", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> E2BStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def fail_next(self, status: int, message: str, times: int = 1) -> None:
        """Answer the next ``times`` requests with ``status`` and an ``Error`` body."""
        with self._lock:
            self._faults += [(status, message)] * times

    def requests_to(self, method: str, path: str) -> list[Recorded]:
        """The recorded requests with this method whose path matches ``path`` (a regex)."""
        return [r for r in self.requests if r.method == method and re.fullmatch(path, r.path)]

    # ---- the API -------------------------------------------------------------------------------

    def handle(self, request: Recorded) -> tuple[int, Any, dict[str, str]]:
        """Answer one authenticated request: status, JSON body (None for none) and extra headers."""
        method, path, query, body = request.method, request.path, request.query, request.body
        if method == "POST" and path == "/v2/sandboxes":
            return self._create(body, request.headers.get("idempotency-key"))
        if method == "GET" and path == "/v2/sandboxes":
            return self._list(query)
        if m := re.fullmatch(r"/v2/sandboxes/([^/]+)/connect", path):
            if method == "POST":
                return self._connect(m.group(1), body or {})
        if m := re.fullmatch(r"/sandboxes/([^/]+)", path):
            sandbox = self.sandboxes.get(m.group(1))
            if method == "GET":
                return (200, sandbox.detail(), {}) if sandbox else _error(404, "sandbox not found")
            if method == "DELETE":
                if sandbox is None:
                    return _error(404, f"sandbox {m.group(1)} not found")
                del self.sandboxes[sandbox.sandbox_id]
                return 204, None, {}
        return _error(404, f"no route for {method} {path}")

    def _create(self, body: dict[str, Any], key: str | None) -> tuple[int, Any, dict[str, str]]:
        if not isinstance(body, dict) or not body.get("templateID"):
            return _error(400, "templateID is required")
        if key is not None:
            if not _IDEMPOTENCY_KEY.fullmatch(key):
                return _error(400, "invalid Idempotency-Key")
            known = self.sandboxes.get(self.idempotency_keys.get(key, ""))
            if known is not None:
                return 201, known.created(), {}
        sandbox = StoredSandbox(
            sandbox_id=f"sbx{next(self._ids):04d}{uuid.uuid4().hex[:12]}",
            template_id=body["templateID"],
            metadata=dict(body.get("metadata") or {}),
            started_at=datetime.now(UTC),
            timeout=int(body.get("timeout", 15)),
            allow_internet_access=body.get("allow_internet_access"),
            auto_pause=bool(body.get("autoPause", False)),
        )
        self.sandboxes[sandbox.sandbox_id] = sandbox
        if key is not None:
            self.idempotency_keys[key] = sandbox.sandbox_id
        return 201, sandbox.created(), {}

    def _list(self, query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str]]:
        wanted: dict[str, str] = {}
        for raw in query.get("metadata", []):
            wanted.update({unquote(k): unquote(v) for k, v in parse_qsl(raw, keep_blank_values=True)})
        states = {s for raw in query.get("state", []) for s in raw.split(",")} or {"running", "paused"}
        matching = sorted(
            (
                s
                for s in self.sandboxes.values()
                if s.state in states and all(s.metadata.get(k) == v for k, v in wanted.items())
            ),
            key=lambda s: (s.started_at, s.sandbox_id),
        )
        limit = int(query.get("limit", [str(self.page_size)])[0])
        start = int(query.get("nextToken", ["0"])[0])
        page = matching[start : start + limit]
        headers = {"x-next-token": str(start + limit)} if start + limit < len(matching) else {}
        return 200, [s.listed() for s in page], headers

    def _connect(self, sandbox_id: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None:
            return _error(404, f"sandbox {sandbox_id} not found")
        status = 200
        if sandbox.state == "paused":
            sandbox.state, status = "running", 201
        if "timeout" in body:
            sandbox.timeout = max(
                sandbox.timeout,
                int((datetime.now(UTC) - sandbox.started_at).total_seconds()) + int(body["timeout"]),
            )
        return status, sandbox.created(), {}


def _error(status: int, message: str) -> tuple[int, Any, dict[str, str]]:
    return status, {"code": status, "message": message}, {}


def _handler(standin: E2BStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query, keep_blank_values=True)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.command == "GET" and url.path == "/v2/sandboxes":
                time.sleep(standin.list_delay)
            request = Recorded(self.command, url.path, query, headers, body)
            with standin._lock:
                standin.requests.append(request)
                if headers.get("x-api-key") != standin.api_key:
                    status, payload, extra = _error(401, "Invalid API key")
                elif standin._faults:
                    status, message = standin._faults.pop(0)
                    status, payload, extra = _error(status, message)
                else:
                    status, payload, extra = standin.handle(request)
            data = json.dumps(payload).encode() if payload is not None else b""
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            if payload is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
