"""A notes service as an MCP server over stdio, built with the official ``mcp`` SDK (2.x: its
``MCPServer``, which 1.x called ``FastMCP``): the server the docs' runnable MCP example gives its
agent (docs/writing-an-agent.md). ``http_server.py`` serves the same tools over Streamable HTTP.

Tools: ``search_notes`` (a read), ``add_note`` (a write, idempotent by ``request_id``: the same id
twice adds one note) and ``find_note`` (finds the note added under a ``request_id``, or null). The
worker runs it contained: its notes live in its private, writable ``/tmp``.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp.server.mcpserver import MCPServer

NOTES = Path("/tmp/notes.json")
app = MCPServer("notes")

SEED = {"seed-1": {"id": 1, "text": "The printer on floor 3 is out of toner."}}


def _notes() -> dict[str, dict[str, object]]:
    return json.loads(NOTES.read_text()) if NOTES.exists() else dict(SEED)


@app.tool()
def search_notes(query: str) -> str:
    """The notes that mention ``query``."""
    return json.dumps([n["text"] for n in _notes().values() if query.lower() in str(n["text"]).lower()])


@app.tool()
def add_note(text: str, request_id: str) -> str:
    """Add a note."""
    notes = _notes()
    note = notes.setdefault(request_id, {"id": len(notes) + 1, "text": text})
    NOTES.write_text(json.dumps(notes))
    return json.dumps(note)


@app.tool()
def find_note(request_id: str) -> str:
    """The note added under ``request_id``, or null."""
    return json.dumps(_notes().get(request_id))


if __name__ == "__main__":
    app.run()
