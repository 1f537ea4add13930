"""Real MCP servers (the official ``mcp`` SDK's ``MCPServer``, formerly FastMCP) the tests start."""
