"""The worker's health endpoint: ``GET /healthz`` answers 200 while the worker serves, 503 while it
starts or drains (so a load balancer or orchestrator stops counting on it), with a JSON body naming
its state, roles and task queues. Any other path is 404.

It stays a few lines of ``asyncio.start_server`` rather than moving onto the HTTP API's framework
(Starlette and uvicorn): one fixed route has nothing for a router to simplify, and every worker
would then need the ``api`` extra for it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass, field
from typing import Literal

import structlog

log = structlog.get_logger("agent_worker.health")

State = Literal["starting", "serving", "draining"]


@dataclass
class Health:
    """What the endpoint reports; the worker updates ``state`` as it starts and drains."""

    roles: list[str]
    task_queues: list[str] = field(default_factory=list)
    state: State = "starting"

    def body(self) -> dict[str, object]:
        return {
            "status": self.state,
            "roles": self.roles,
            "task_queues": self.task_queues,
            "pid": os.getpid(),
        }


async def serve_health(bind: str, health: Health) -> asyncio.Server:
    """Serve ``GET /healthz`` on ``host:port`` until the returned server is closed.

    Raises:
        ValueError: ``bind`` is not ``host:port``.
        OSError: the address cannot be bound.
    """
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"health endpoint address {bind!r} is not host:port")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            method, path, *_ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if path.split("?", 1)[0] != "/healthz":
                status, body = "404 Not Found", {"error": "only GET /healthz is served"}
            elif method not in ("GET", "HEAD"):
                status, body = "405 Method Not Allowed", {"error": "use GET"}
            else:
                status = "200 OK" if health.state == "serving" else "503 Service Unavailable"
                body = health.body()
            data = json.dumps(body).encode()
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
            ).encode()
            writer.write(head + (data if method != "HEAD" else b""))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ValueError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, host or "0.0.0.0", int(port))
    log.info("health endpoint listening", url=f"http://{bind}/healthz")
    return server
