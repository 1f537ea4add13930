"""An MCP server over stdio whose tools answer as much as they are asked, for the output bounds.

Tools: ``big_text`` answers ``chars`` characters of text; ``many_items`` answers ``count`` text
content items of ``chars`` characters each; ``big_image`` answers a PNG image content item of
``size`` bytes; ``big_structured`` answers structured content (a dict) holding ``chars``
characters; ``big_write`` (a write: it takes an operation key) answers ``chars`` characters.
Every answer is made of one repeated letter (its first letter says which tool made it).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Image, MCPServer
from mcp.types import TextContent

app = MCPServer("flood")


@app.tool()
def big_text(chars: int) -> str:
    """Answer ``chars`` characters."""
    return "t" * chars


@app.tool()
def many_items(count: int, chars: int) -> list[TextContent]:
    """Answer ``count`` text items of ``chars`` characters each."""
    return [TextContent(type="text", text="m" * chars) for _ in range(count)]


@app.tool()
def big_image(size: int) -> Image:
    """Answer a PNG image of ``size`` bytes."""
    return Image(data=b"\x89PNG" + b"i" * max(size - 4, 0), format="png")


@app.tool()
def big_structured(chars: int) -> dict[str, Any]:
    """Answer structured content holding ``chars`` characters."""
    return {"s": "s" * chars}


@app.tool()
def big_write(chars: int, key: str) -> str:
    """A write that answers ``chars`` characters."""
    return "w" * chars


if __name__ == "__main__":
    app.run()
