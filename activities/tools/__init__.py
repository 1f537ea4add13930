"""Effect tools an agent brings: its own async functions (``effect_tool``) and its MCP servers,
each call run as an activity of its own (``tool.call``, ``mcp.call``)."""

from agent_worker.activities.tools.functions import effect_tool
from agent_worker.activities.tools.mcp import McpRules, McpWrite

__all__ = ["McpRules", "McpWrite", "effect_tool"]
