"""A real local HTTP server speaking the OpenAI Responses and Chat Completions APIs, scripted with a
queue of replies.

``POST /v1/responses`` and ``POST /v1/chat/completions`` answer with the next scripted reply
(status, headers, JSON body; a text reply takes the shape of the API asked); with the queue empty
they answer the ``always`` reply if one is set, else 500, so an unexpected extra request fails
loudly instead of passing quietly. Every request is recorded with its path, arrival time
(``time.monotonic()``) and JSON body.

A request with ``"stream": true`` gets a 200 reply as the API's Server-Sent Events
(``openai_stream``): the same answer, word by word, ``chunk_delay`` seconds between chunks (the
reply's own, else the stub's), so a test can watch tokens arrive before the answer is complete. A stub told to
``refuse_stream`` answers every streamed request with that error instead, as a server that does not
stream does, and keeps its scripted replies for the requests without ``stream``; one told to
``ignore_stream`` answers them with a plain JSON body.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers.openai_stream import chat_events, responses_events


@dataclass(frozen=True)
class Reply:
    """One scripted answer; ``delay`` seconds pass before it is sent (to provoke client timeouts)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    delay: float = 0.0
    text: str | None = None  # a 200 whose assistant message says this, in the shape of the API asked
    chunk_delay: float | None = None  # between a streamed reply's chunks (None: the stub's)
    cut_after: int | None = None  # a streamed reply's connection drops after this many chunks
    # With cut_after: the reply declares the whole stream's length, so the drop is a transport error
    # (an incomplete body) rather than a stream that simply ends early.
    torn: bool = False
    stream: bool = False  # set by the stub: the request asked for a stream
    path: str = ""  # set by the stub: the API asked


@dataclass(frozen=True)
class RecordedRequest:
    """A request the stub received."""

    method: str
    path: str
    at: float
    body: Any


def response_json(text: str, *, model: str = "gpt-test", response_id: str = "resp_stub") -> dict[str, Any]:
    """A completed Responses API object whose one output is an assistant message saying ``text``."""
    input_tokens, output_tokens = 5, len(text.split())
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": model,
        "output": [
            {
                "id": "msg_stub",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def chat_completion_json(text: str, *, model: str = "gpt-test") -> dict[str, Any]:
    """A Chat Completions object whose one choice is an assistant message saying ``text``."""
    prompt_tokens, completion_tokens = 5, len(text.split())
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_json(
    message: str, *, type: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """An error body in the shape the OpenAI API sends."""
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


class OpenAIStub:
    """The scripted server; use as a context manager, then point a client at ``base_url``."""

    def __init__(self, chunk_delay: float = 0.0) -> None:
        self.chunk_delay = chunk_delay
        self.requests: list[RecordedRequest] = []
        self._replies: collections.deque[Reply] = collections.deque()
        self._always: Reply | None = None
        self._answer: Callable[[str, Any], dict[str, Any]] | None = None
        self._refusal: Reply | None = None
        self._ignore_stream = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        # A short poll interval keeps shutdown (and so each test's teardown) fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="openai-stub", daemon=True
        )

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def settings(self) -> dict[str, Any]:
        """The worker settings that send its model calls here (``make_config(dir, **stub.settings())``)."""
        return {
            "model_provider": "openai",
            "openai_api_key": "sk-test-not-real",
            "openai_base_url": self.base_url,
            "openai_model": "gpt-test",
        }

    def reply(
        self,
        status: int = 200,
        *,
        headers: dict[str, str] | None = None,
        body: Any = None,
        delay: float = 0.0,
    ) -> None:
        """Queue a reply, sent ``delay`` seconds after its request arrives."""
        with self._lock:
            self._replies.append(Reply(status, headers or {}, body, delay))

    def reply_text(
        self,
        text: str,
        *,
        delay: float = 0.0,
        chunk_delay: float | None = None,
        cut_after: int | None = None,
        torn: bool = False,
    ) -> None:
        """Queue a 200 whose assistant message says ``text`` (in either API's shape); streamed with
        ``chunk_delay`` between chunks, and broken off after ``cut_after`` chunks if set (``torn``:
        mid-body, a transport error for the client)."""
        reply = Reply(
            200, {}, None, delay, text=text, chunk_delay=chunk_delay, cut_after=cut_after, torn=torn
        )
        with self._lock:
            self._replies.append(reply)

    def always(
        self,
        status: int = 200,
        *,
        text: str | None = None,
        message: str = "",
        code: str | None = None,
        chunk_delay: float | None = None,
    ) -> None:
        """Answer every request the queue does not: ``text`` (a 200), or an error with ``message``."""
        reply = (
            Reply(status, {}, None, 0.0, text=text, chunk_delay=chunk_delay)
            if text is not None
            else Reply(
                status,
                {},
                error_json(
                    message, type="server_error" if status >= 500 else "insufficient_quota", code=code
                ),
            )
        )
        with self._lock:
            self._always = reply

    def refuse_stream(self, status: int = 400, message: str = "stream is not supported") -> None:
        """Answer every request with ``"stream": true`` with this error, before any scripted reply."""
        with self._lock:
            self._refusal = Reply(status, {}, error_json(message))

    def ignore_stream(self) -> None:
        """Answer streamed requests with a plain JSON body, as a server that ignores ``stream`` does."""
        with self._lock:
            self._ignore_stream = True

    def streamed(self) -> list[bool]:
        """Whether each request so far asked for a stream, in order."""
        with self._lock:
            return [isinstance(r.body, dict) and r.body.get("stream") is True for r in self.requests]

    def answer_with(self, answer: Callable[[str, Any], dict[str, Any]]) -> None:
        """Answer every request the queue does not with ``answer(path, body)``: a 200 with that JSON
        body (a conversation that depends on what the request holds: its tools, its tool outputs)."""
        with self._lock:
            self._answer = answer

    def paths(self) -> list[str]:
        """The paths of the requests so far, in order."""
        with self._lock:
            return [r.path for r in self.requests]

    def reply_error(
        self, status: int, message: str, *, headers: dict[str, str] | None = None, code: str | None = None
    ) -> None:
        """Queue an error reply with the provider's ``message``."""
        self.reply(status, headers=headers, body=error_json(message, code=code))

    def __enter__(self) -> OpenAIStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, method: str, path: str, body: Any) -> Reply:
        with self._lock:
            self.requests.append(RecordedRequest(method, path, time.monotonic(), body))
            if method != "POST" or path not in ("/v1/responses", "/v1/chat/completions"):
                return Reply(404, {}, error_json(f"stub does not serve {method} {path}"))
            stream = isinstance(body, dict) and body.get("stream") is True
            if stream and self._refusal is not None:
                return self._refusal
            if self._replies:
                reply = self._replies.popleft()
            elif self._answer is not None:
                reply = Reply(200, {}, self._answer(path, body))
            elif self._always is not None:
                reply = self._always
            else:
                return Reply(500, {}, error_json("openai stub: no scripted reply left", type="server_error"))
            delay = self.chunk_delay if reply.chunk_delay is None else reply.chunk_delay
            reply = dataclasses.replace(
                reply, stream=stream and not self._ignore_stream, path=path, chunk_delay=delay
            )
            if reply.text is None:
                return reply
            model = body.get("model", "gpt-test") if isinstance(body, dict) else "gpt-test"
            shape = chat_completion_json if path == "/v1/chat/completions" else response_json
            return dataclasses.replace(reply, body=shape(reply.text, model=model), text=None)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                self._send(stub._next("POST", self.path, body))

            def do_GET(self) -> None:
                self._send(stub._next("GET", self.path, None))

            def _send(self, reply: Reply) -> None:
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.stream and reply.status == 200 and isinstance(reply.body, dict):
                    self._stream(reply)
                    return
                payload = b"" if reply.body is None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (a timeout test); there is nobody left to answer.
                    pass

            def _stream(self, reply: Reply) -> None:
                events = chat_events if reply.path == "/v1/chat/completions" else responses_events
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    chunks = list(events(reply.body))
                    if reply.torn:
                        self.send_header("Content-Length", str(sum(len(c) for c in chunks)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    for n, chunk in enumerate(chunks):
                        if reply.cut_after is not None and n >= reply.cut_after:
                            break
                        if n and reply.chunk_delay:
                            time.sleep(reply.chunk_delay)
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away mid-stream (a killed worker)
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


__all__ = ["OpenAIStub", "RecordedRequest", "Reply", "chat_completion_json", "error_json", "response_json"]
