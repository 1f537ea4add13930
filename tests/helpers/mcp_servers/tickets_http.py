"""A ticket system as an MCP server over Streamable HTTP (``/mcp``) or SSE (``/sse``), for tests.

    python tickets_http.py PORT STATE_FILE [TOKEN]

Tickets are kept in STATE_FILE (JSON) by ``request_id``: creating twice under one id makes one
ticket. With TICKETS_SLOW_AFTER_COMMIT=S in the environment, ``create_ticket`` answers S seconds
after it committed (crash tests kill the caller in between). ``page_oncall`` has no lookup: each
call counts a page, then answers TICKETS_PAGE_SECONDS later. The file also counts effects (tickets
made), ``create_ticket`` calls and pages. TICKETS_TRANSPORT=sse serves SSE instead of Streamable
HTTP. With TOKEN, every HTTP request must carry ``Authorization: Bearer TOKEN`` (else 401).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

PORT, STATE = int(sys.argv[1]), Path(sys.argv[2])
TOKEN = sys.argv[3] if len(sys.argv) > 3 else None

app = MCPServer("tickets")


def _load() -> dict[str, Any]:
    if STATE.exists():
        return json.loads(STATE.read_text())
    return {"tickets": {}, "effects": 0, "create_calls": 0}


def _save(state: dict[str, Any]) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(STATE)


@app.tool()
def search(query: str) -> str:
    """Search the tickets' titles."""
    titles = [t["title"] for t in _load()["tickets"].values() if query.lower() in t["title"].lower()]
    return f"found {len(titles)} for {query!r}: {titles}"


@app.tool()
def create_ticket(title: str, request_id: str) -> str:
    """Open a ticket."""
    state = _load()
    state["create_calls"] += 1
    ticket = state["tickets"].get(request_id)
    if ticket is None:
        ticket = {"id": f"T-{len(state['tickets']) + 1}", "title": title, "request_id": request_id}
        state["tickets"][request_id] = ticket
        state["effects"] += 1
    _save(state)
    # Crash tests: the ticket is committed; the answer comes this much later.
    time.sleep(float(os.environ.get("TICKETS_SLOW_AFTER_COMMIT", "0")))
    return json.dumps(ticket)


@app.tool()
def find_ticket(request_id: str) -> str:
    """The ticket opened under ``request_id``, or null."""
    return json.dumps(_load()["tickets"].get(request_id))


@app.tool()
def page_oncall(message: str, key: str) -> str:
    """Page the on-call engineer."""
    state = _load()
    state["pages"] = state.get("pages", 0) + 1
    _save(state)
    time.sleep(float(os.environ.get("TICKETS_PAGE_SECONDS", "0")))
    return f"paged: {message}"


@app.tool()
def fail_tool(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"refused: {reason}")


inner = app.sse_app() if os.environ.get("TICKETS_TRANSPORT") == "sse" else app.streamable_http_app()


async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if TOKEN and scope["type"] == "http":
        headers = dict(scope.get("headers") or [])
        if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
    await inner(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(guarded, host="127.0.0.1", port=PORT, log_level="warning")
