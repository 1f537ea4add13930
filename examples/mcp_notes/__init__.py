"""An MCP server for the docs' runnable example: ``server.py``, a notes service over stdio."""

from __future__ import annotations

from pathlib import Path

SERVER = Path(__file__).parent / "server.py"

__all__ = ["SERVER"]
