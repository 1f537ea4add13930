"""Real MCP servers (the official ``mcp`` SDK's ``MCPServer``, formerly FastMCP) the tests start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_worker.cli.devserver import free_port, port_open, stop_process_group

SERVERS = Path(__file__).parent


@dataclass
class TicketServer:
    url: str
    state: Path
    proc: subprocess.Popen[bytes]

    def counts(self) -> dict[str, Any]:
        return (
            json.loads(self.state.read_text()) if self.state.exists() else {"effects": 0, "create_calls": 0}
        )

    def stop(self) -> None:
        stop_process_group(self.proc, grace=5)


def start_tickets(tmp_path: Path, token: str | None = None, *, sse: bool = False, **env: str) -> TicketServer:
    """The ticket server over Streamable HTTP (over SSE with ``sse``) on a free loopback port, its
    state in ``tmp_path`` (``env``: extra environment, e.g. ``TICKETS_SLOW_AFTER_COMMIT``)."""
    port = free_port()
    state = tmp_path / "tickets.json"
    argv = [
        sys.executable,
        str(SERVERS / "tickets_http.py"),
        str(port),
        str(state),
        *([token] if token else []),
    ]
    if sse:
        env["TICKETS_TRANSPORT"] = "sse"
    proc = subprocess.Popen(argv, start_new_session=True, env={**os.environ, **env})
    deadline = time.monotonic() + 30
    while not port_open("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process_group(proc, grace=1)
            raise RuntimeError("the ticket MCP server did not start")
        time.sleep(0.1)
    return TicketServer(f"http://127.0.0.1:{port}/{'sse' if sse else 'mcp'}", state, proc)
