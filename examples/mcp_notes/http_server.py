"""The notes service of ``server.py`` as an MCP server over Streamable HTTP, for agents that reach
their MCP server by URL (``MCPServerStreamableHttp``) instead of starting it (stdio)::

    python -m agent_worker.examples.mcp_notes.http_server --port 8765 --notes notes.json

serves ``http://127.0.0.1:8765/mcp`` (loopback only, unless ``--host`` says otherwise) and keeps
its notes in ``--notes``. The worker does not start or contain such a server: it is a service
you run, like the business system a write reaches. Built with the ``mcp`` SDK 2.x (``MCPServer``;
1.x called it ``FastMCP``): ``MCPServer.run("streamable-http", host=..., port=...)``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from agent_worker.examples.mcp_notes import server

DEFAULT_PORT = 8765


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the notes tools over Streamable HTTP until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port ({DEFAULT_PORT})")
    parser.add_argument("--notes", type=Path, default=Path("notes.json"), help="the notes file")
    args = parser.parse_args(argv)
    server.NOTES = args.notes.resolve()
    server.app.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
