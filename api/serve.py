"""Serving the HTTP API with uvicorn, with limits on what a connection may hold before it is a request.

uvicorn bounds a request's headers (``h11_max_incomplete_event_size``) and closes a kept-alive
connection that stays idle (``timeout_keep_alive``), but waits forever for the headers of a
connection's first request: a client that sends a byte a minute holds its connection (and a file
descriptor) for good. ``HeaderDeadline`` is uvicorn's own h11 protocol (passed as ``http=``, the
class uvicorn's ``Config`` accepts) that closes a connection whose request headers have not all
arrived within the deadline. The body is bounded by ``api.guard`` once the headers are in.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

# The most header bytes a request may send (h11 counts the request line and every header).
MAX_HEADER_BYTES = 32 * 1024


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers take longer than
    ``seconds`` (the class attribute, set by ``server_config``)."""

    seconds: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline_cycle = None
        self._deadline = self.loop.call_later(self.seconds, self._headers_late)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not self._deadline_cycle and self._deadline is not None:
            self._deadline.cancel()  # a request's headers are in: the deadline is met
            self._deadline = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A kept-alive connection's next request: uvicorn's timeout_keep_alive closes it while idle,
        # but a byte cancels that; the deadline covers the next request's headers too.
        idle = self.cycle is None or self.cycle.response_complete  # not a pipelined request's
        if idle and self._deadline is None and not self.transport.is_closing():
            self._deadline_cycle = self.cycle
            self._deadline = self.loop.call_later(self.seconds, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._deadline = None
        if self.cycle is self._deadline_cycle and not self.transport.is_closing():
            self.transport.close()


def server_config(app: Any, host: str, port: int, header_timeout: float, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for the API on ``host:port``: request headers within ``header_timeout``
    seconds and ``MAX_HEADER_BYTES``, an idle kept-alive connection closed after as long."""
    protocol = type("ApiHeaderDeadline", (HeaderDeadline,), {"seconds": header_timeout})
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        timeout_keep_alive=max(1, int(header_timeout)),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        **options,
    )


__all__ = ["MAX_HEADER_BYTES", "HeaderDeadline", "server_config"]
