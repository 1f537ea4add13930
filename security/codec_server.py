"""A codec server: lets the Temporal Web UI and CLI show encrypted payloads to people allowed to see them.

It speaks the Temporal codec server protocol over the standard library's HTTP server:

- ``POST .../encode`` and ``POST .../decode`` (only the last path segment counts, so
  ``http://host:port/{namespace}/decode`` works too) take ``{"payloads": [...]}``, a ``Payloads``
  message in proto JSON (``metadata`` values and ``data`` base64), and answer the same shape run
  through the codec. Malformed JSON or a payload the codec refuses answers ``400`` with
  ``{"error": "..."}``; an unknown path ``404``; another method on a known path ``405``.
- With a token, both require ``Authorization: Bearer <token>`` and answer ``401`` without it.
- ``OPTIONS`` answers the browser's CORS preflight (never authenticated, as browsers send no
  credentials there); responses carry ``Access-Control-Allow-Origin`` only for the configured UI origin.

Point clients at it::

    temporal workflow show -w TASK_ID --codec-endpoint http://127.0.0.1:8081 --codec-auth "Bearer $TOKEN"

and, in the Web UI, set the codec server endpoint (Settings, or the UI's ``codec.endpoint`` config).

Run it with ``python -m agent_worker.security.codec_server --port 8081``. Its configuration is the worker's
(``WorkerConfig``, read once at start): keys from ``AGENT_WORKER_ENCRYPTION_KEYS``
(``kid:BASE64KEY,...``) and ``AGENT_WORKER_ENCRYPTION_KEY_ID``, the token from
``AGENT_WORKER_CODEC_TOKEN``, logging from ``AGENT_WORKER_LOG_FORMAT`` and ``AGENT_WORKER_LOG_LEVEL``.
Without a token it only listens on a loopback address, and answers only requests whose ``Host`` header
names a loopback address or ``localhost`` (``421`` otherwise): a web page whose domain an attacker
re-points at 127.0.0.1 (DNS rebinding) sends its own name as the ``Host``, so it cannot read decrypted
payloads through the visitor's browser.

It stays on the standard library rather than the HTTP API's framework (Starlette and uvicorn): its
rules (the ``Host`` check, CORS for one origin, the token, the body limit) are the code either way,
its blocking ``start()``/``stop()`` in a thread suits callers without an event loop, and decrypting
payloads then needs no ``api`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import structlog
from agent_worker.schemas.config import ENV_PREFIX
from agent_worker.security import hosts
from agent_worker.security.codec import ENV_KEYS, EncryptionError
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

if TYPE_CHECKING:
    from agent_worker.schemas.config import WorkerConfig

log = structlog.get_logger("agent_worker.codec_server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
# A history page the UI decodes at once stays far below this; anything bigger is refused unread.
MAX_BODY_BYTES = 64 * 1024 * 1024
ALLOWED_HEADERS = "Authorization, Content-Type, X-Namespace"
ENV_TOKEN = ENV_PREFIX + "CODEC_TOKEN"  # WorkerConfig.codec_token, named in messages

_Operation = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


class CodecServer:
    """The codec server, serving from a background thread between ``start()`` and ``stop()``.

    Args:
        codec: The payload codec to run (e.g. ``security.codec.EncryptionCodec``).
        host: Address to listen on.
        port: Port to listen on; 0 picks a free one (see ``url``).
        token: When set, requests need ``Authorization: Bearer <token>``.
        ui_origin: The Web UI's origin (e.g. ``http://localhost:8233``), allowed cross-origin calls.
    """

    def __init__(
        self,
        codec: PayloadCodec,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        token: str | None = None,
        ui_origin: str | None = None,
    ) -> None:
        self.codec = codec
        self.host = host
        self.port = port
        self.ui_origin = ui_origin.rstrip("/") if ui_origin else None
        self._expected_auth = f"Bearer {token}".encode() if token else None
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL clients use as ``--codec-endpoint`` (the bound port once started)."""
        return f"http://{self.host}:{self.port}"

    @property
    def requires_token(self) -> bool:
        """Whether requests must carry the bearer token."""
        return self._expected_auth is not None

    def start(self) -> CodecServer:
        """Bind and serve in a daemon thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("codec server already started")
        handler = type("Handler", (_Handler,), {"app": self})
        self._httpd = ThreadingHTTPServer((self.host, self.port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="codec-server", daemon=True)
        self._thread.start()
        log.info("codec server listening", url=self.url, token=self.requires_token, ui_origin=self.ui_origin)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> CodecServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header value passes (always, without a token)."""
        if self._expected_auth is None:
            return True
        if header is None:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        given = f"Bearer {credentials.strip()}".encode() if scheme.lower() == "bearer" else b""
        return hmac.compare_digest(given, self._expected_auth)

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request's ``Host`` header passes: always with a token; without one, only a
        loopback address or ``localhost`` (with any port) passes, so DNS rebinding cannot reach it."""
        if self._expected_auth is not None:
            return True
        return hosts.host_allowed(header)

    def operation(self, path: str) -> _Operation | None:
        """The codec method a request path asks for (by its last segment), if any."""
        last = path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        return {"encode": self.codec.encode, "decode": self.codec.decode}.get(last)


class _Handler(BaseHTTPRequestHandler):
    app: CodecServer
    server_version = "agent-worker-codec"
    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        return self.server_version

    def do_OPTIONS(self) -> None:
        if self._host_refused():
            return
        self._reply(HTTPStatus.NO_CONTENT, None, preflight=True)

    def do_POST(self) -> None:
        if self._host_refused():
            return
        operation = self.app.operation(self.path)
        if operation is None:
            self._drain()
            self._error(HTTPStatus.NOT_FOUND, "unknown path: POST .../encode or .../decode")
            return
        if not self.app.authorized(self.headers.get("Authorization")):
            self._drain()
            self._error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
            return
        length = self._content_length()
        if length is None:
            return
        try:
            request = json_format.Parse(self.rfile.read(length), Payloads(), ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError) as err:
            self._error(HTTPStatus.BAD_REQUEST, f"body is not a Payloads message in proto JSON: {err}")
            return
        try:
            result = asyncio.run(operation(list(request.payloads)))
        except EncryptionError as err:
            self._error(HTTPStatus.BAD_REQUEST, str(err))
            return
        except Exception:
            log.exception("codec failed", path=self.path)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "the codec failed; see the codec server's log")
            return
        self._reply(HTTPStatus.OK, {"payloads": [json_format.MessageToDict(p) for p in result]})

    def do_GET(self) -> None:
        if self._host_refused():
            return
        self._not_allowed()

    do_PUT = do_DELETE = do_PATCH = do_GET

    def _not_allowed(self) -> None:
        self._drain()
        if self.app.operation(self.path) is None:
            self._error(HTTPStatus.NOT_FOUND, "unknown path: POST .../encode or .../decode")
        else:
            self._error(HTTPStatus.METHOD_NOT_ALLOWED, "use POST", extra={"Allow": "POST, OPTIONS"})

    def _host_refused(self) -> bool:
        """Answer 421 and say so when the ``Host`` header is not allowed (see ``host_allowed``)."""
        if self.app.host_allowed(self.headers.get("Host")):
            return False
        self._drain()
        self._error(
            HTTPStatus.MISDIRECTED_REQUEST,
            "without a token this codec server answers only requests addressed to localhost or a "
            "loopback address (Host header)",
        )
        return True

    def _content_length(self) -> int | None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required", close=True)
            return None
        if length < 0 or length > MAX_BODY_BYTES:
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes", close=True)
            return None
        return length

    def _drain(self) -> None:
        """Read an unused body, so the connection stays usable for the next request."""
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self.close_connection = True
            return
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        elif length:
            self.close_connection = True

    def _error(
        self, status: HTTPStatus, message: str, *, extra: Mapping[str, str] = {}, close: bool = False
    ) -> None:
        if status is HTTPStatus.UNAUTHORIZED:
            extra = {**extra, "WWW-Authenticate": 'Bearer realm="codec"'}
        if close:
            self.close_connection = True
        self._reply(status, {"error": message}, extra=extra)

    def _reply(
        self,
        status: HTTPStatus,
        body: dict[str, Any] | None,
        *,
        preflight: bool = False,
        extra: Mapping[str, str] = {},
    ) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for name, value in {**self._cors(preflight), **extra}.items():
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _cors(self, preflight: bool) -> dict[str, str]:
        origin = self.headers.get("Origin")
        if self.app.ui_origin is None or origin is None or origin.rstrip("/") != self.app.ui_origin:
            return {"Vary": "Origin"} if self.app.ui_origin else {}
        headers = {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Credentials": "true",
            "Vary": "Origin",
        }
        if preflight:
            headers |= {
                "Access-Control-Allow-Methods": "POST, OPTIONS",
                "Access-Control-Allow-Headers": self.headers.get("Access-Control-Request-Headers")
                or ALLOWED_HEADERS,
                "Access-Control-Max-Age": "600",
            }
        return headers

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # Method, path and status only: never bodies or the Authorization header.
        log.info(
            "codec request",
            method=self.command,
            path=self.path,
            status=int(code) if str(code).isdigit() else code,
            namespace=headers.get("X-Namespace") if (headers := getattr(self, "headers", None)) else None,
        )

    def log_message(self, format: str, *args: Any) -> None:
        log.warning("codec server: " + format % args)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``python -m agent_worker.security.codec_server``: serve until SIGINT/SIGTERM. The configuration
    (``WorkerConfig``: keys, token, logging) is read from ``env`` once, here."""
    from agent_worker.schemas.config import ConfigError, WorkerConfig
    from agent_worker.telemetry import configure_logging

    parser = argparse.ArgumentParser(
        prog="python -m agent_worker.security.codec_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--ui-origin", help="the Temporal Web UI's origin to allow in CORS, e.g. http://localhost:8233"
    )
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"codec server: {message}", file=sys.stderr)
        return 2

    try:
        config = WorkerConfig.from_env(os.environ if env is None else env)
    except ConfigError as err:
        return fail(str(err))
    configure_logging(config)
    return serve(config, host=args.host, port=args.port, ui_origin=args.ui_origin, fail=fail)


def serve(
    config: WorkerConfig,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    ui_origin: str | None = None,
    fail: Callable[[str], int],
) -> int:
    """Serve ``config``'s keys (``encryption_keys``, ``encryption_key_id``), behind its
    ``codec_token`` when set, until SIGINT/SIGTERM; ``fail(message)`` reports a refusal to start."""
    from agent_worker.security.codec import KeySpecError, converter_for

    spec = config.encryption_keys.get_secret_value() if config.encryption_keys else ""
    if not spec.strip():
        return fail(f"{ENV_KEYS} is not set (a 'KEY_ID:BASE64KEY,...' list)")
    try:
        codec = converter_for(config).payload_codec
    except KeySpecError as err:
        return fail(str(err))
    assert codec is not None
    token = config.codec_token.get_secret_value() if config.codec_token else None
    if token is None and not hosts.is_loopback(host):
        return fail(f"refusing to serve decrypted payloads on {host} without {ENV_TOKEN}")
    if token is None:
        log.warning(f"no {ENV_TOKEN}: anyone who can reach {host}:{port} can decrypt payloads")

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    server = CodecServer(codec, host=host, port=port, token=token, ui_origin=ui_origin)
    try:
        server.start()
    except OSError as err:
        return fail(f"cannot listen on {host}:{port}: {err}")
    while not stop.wait(0.5):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
