"""A notes MCP server over stdio, for tests of containment.

Tools: ``read_file_tool`` reads a file, ``write_note`` writes ``<NOTES_DIR>/<key>.txt`` (NOTES_DIR
from the environment, /tmp by default), ``net_probe`` tries a TCP connection to 127.0.0.1 at the
port in PROBE_PORT, and ``whoami`` reports the uid and the environment's names.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from mcp.server.mcpserver import MCPServer

app = MCPServer("notes")


@app.tool()
def read_file_tool(path: str) -> str:
    """Read a text file."""
    return Path(path).read_text()


@app.tool()
def write_note(text: str, key: str) -> str:
    """Write a note."""
    path = Path(os.environ.get("NOTES_DIR", "/tmp")) / f"{key}.txt"
    try:
        path.write_text(text)
    except OSError as err:
        return f"write failed: {err}"
    return f"wrote {path}"


@app.tool()
def net_probe() -> str:
    """Try to reach the loopback listener at PROBE_PORT."""
    try:
        with socket.create_connection(("127.0.0.1", int(os.environ["PROBE_PORT"])), timeout=3):
            return "reached"
    except OSError as err:
        return f"unreachable: {err}"


@app.tool()
def whoami() -> str:
    """The uid and the names in the environment."""
    return f"uid={os.getuid()} env={sorted(os.environ)}"


if __name__ == "__main__":
    app.run()
