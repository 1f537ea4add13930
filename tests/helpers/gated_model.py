"""A scripted model server whose streamed answer waits, after its first word, until the test opens a
gate: so a test reads the first token of a turn while that turn is provably still running, without
relying on timing.

It speaks the OpenAI Responses API on loopback (``POST /v1/responses``): a streamed request gets the
answer as the API's Server-Sent Events (``openai_stream``), the first text delta, then nothing until
``gate`` is set, then the rest; a request without ``stream`` gets the whole answer at once.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers.openai_stream import responses_events
from tests.helpers.openai_stub import error_json, response_json

# How long a streamed answer waits for its gate before it goes on regardless (the test then fails
# on ``released``, not on a hang).
GATE_TIMEOUT = 60.0


class GatedModel:
    """The server; use as a context manager.

    Attributes:
        gate: set it to let a held answer go on.
        held: set just before a streamed answer sends its first word, after which it holds.
        released: whether every held answer went on because the gate was set (not on its timeout).
        streamed: how many streamed requests it answered.
    """

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.gate = threading.Event()
        self.held = threading.Event()
        self.released = True
        self.streamed = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> GatedModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _wait_at_gate(self) -> None:
        if not self.gate.wait(GATE_TIMEOUT):
            self.released = False

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                if self.path != "/v1/responses":
                    self._json(404, error_json(f"not served: {self.path}"))
                    return
                reply = response_json(model.answer, model=body.get("model", "gpt-test"))
                if body.get("stream") is not True:
                    self._json(200, reply)
                    return
                model.streamed += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                held = False
                for chunk in responses_events(reply):
                    first_word = not held and b'"response.output_text.delta"' in chunk
                    if first_word:
                        held = True
                        model.held.set()
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    if first_word:
                        model._wait_at_gate()
                self.close_connection = True

            def do_GET(self) -> None:
                self._json(404, error_json(f"not served: GET {self.path}"))

            def _json(self, status: int, body: Any) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


__all__ = ["GatedModel"]
