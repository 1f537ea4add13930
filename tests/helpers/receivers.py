"""Local receivers for notifications: an HTTP server that records webhook POSTs, and an SMTP server
(``aiosmtpd``) that records messages. Both on loopback, on free ports; the tests read what arrived."""

from __future__ import annotations

import email
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent_worker.cli.devserver import free_port
from aiosmtpd.controller import Controller


@dataclass
class WebhookReceiver:
    """Records each POST's ``Idempotency-Key`` and JSON body; answers ``status`` (200 by default)."""

    url: str = ""
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200

    def kinds(self) -> list[str]:
        """The notification kind of each POST, in arrival order."""
        return [body["agent_worker"]["kind"] for _, body in self.posts]


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if receiver.status < 300:
                receiver.posts.append((self.headers.get("Idempotency-Key", ""), body))
            self.send_response(receiver.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class SmtpReceiver:
    """The messages an SMTP server took, with their envelope recipients."""

    url: str = ""
    port: int = 0
    messages: list[tuple[list[str], Message]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((list(envelope.rcpt_tos), email.message_from_bytes(envelope.content)))
        return "250 OK"

    def subjects(self) -> list[str]:
        return [str(m["Subject"]) for _, m in self.messages]


@contextmanager
def smtp_receiver(port: int | None = None) -> Iterator[SmtpReceiver]:
    """An SMTP server on ``port`` (a free one by default)."""
    receiver = SmtpReceiver(port=port or free_port())
    receiver.url = f"smtp://127.0.0.1:{receiver.port}"
    controller = Controller(receiver, hostname="127.0.0.1", port=receiver.port)
    controller.start()
    try:
        yield receiver
    finally:
        controller.stop()


__all__ = ["SmtpReceiver", "WebhookReceiver", "smtp_receiver", "webhook_receiver"]
