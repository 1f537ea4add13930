"""An agent whose MCP server answers far more than a model should read (``flood``, over stdio).

Its model reads 20,000,000 characters with one read tool call, then six large answers in one
response (text, many content items, an image, structured content), then asks a write tool for
20,000,000 characters (approval, then ``mcp.call``). Its final answer is a report, as JSON, of what
it was given: each tool output's length and the artifact digests the outputs name, and the size of
its whole input, so a test reads what reached the model from the task's result.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from agents.items import TResponseOutputItem
from agents.mcp import MCPServerStdio

from agent_worker import Agent, AgentRegistration, McpRules, McpWrite
from agent_worker.testing import ConversationModel, assistant_message, function_call
from tests.helpers.mcp_servers import SERVERS

HUGE = 20_000_000
# One model response: these calls run concurrently inside the turn.
FLOOD: list[tuple[str, dict[str, Any]]] = [
    ("big_text", {"chars": 3_000_000}),
    ("big_text", {"chars": 3_000_001}),
    ("big_text", {"chars": 3_000_002}),
    ("many_items", {"count": 20, "chars": 200_000}),
    ("big_image", {"size": 3_000_000}),
    ("big_structured", {"chars": 2_000_000}),
]
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class FloodModel(ConversationModel):
    """Reads huge outputs, then reports what it was given (a pure function of the conversation)."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        done = sum(1 for item in items if item.get("type") == "function_call")
        if done == 0:
            return [function_call("big_text", {"chars": HUGE}, call_id="read-huge")]
        if done == 1:
            return [function_call(n, a, call_id=f"flood-{i}") for i, (n, a) in enumerate(FLOOD)]
        if done == 1 + len(FLOOD):
            return [function_call("big_write", {"chars": HUGE}, call_id="write-huge")]
        outputs = {
            item["call_id"]: item["output"] if isinstance(item["output"], str) else json.dumps(item["output"])
            for item in items
            if item.get("type") == "function_call_output"
        }
        report = {
            "input_chars": len(json.dumps(items)),
            "outputs": {call: len(text) for call, text in outputs.items()},
            "digests": {call: _DIGEST.findall(text) for call, text in outputs.items()},
        }
        return [assistant_message(json.dumps(report))]


def _build() -> Agent:
    flood = MCPServerStdio(
        {"command": sys.executable, "args": [str(SERVERS / "flood_stdio.py")], "cwd": str(SERVERS)},
        name="flood",
        client_session_timeout_seconds=300,
    )
    return Agent(name="flooder", instructions="Read everything.", mcp_servers=[flood])


registrations = [
    AgentRegistration(
        name="flooder",
        build=_build,
        scripted_model=FloodModel,
        mcp=[
            McpRules(
                server="flood",
                read=["big_text", "many_items", "big_image", "big_structured"],
                write={"big_write": McpWrite(key_argument="key")},
                timeout_seconds=300,
            )
        ],
    )
]
