"""An agent whose own read tools (plain ``@function_tool``s) answer far more than a model should read.

Its model reads 20,000,000 characters with one call, then seven answers in one response (large text,
and a dict the SDK turns into text, one of exactly 16,000 characters and one of 16,001), then asks
its own effect tool (``effect_tool``: approval, then ``tool.call``) for 20,000,000 characters, then
hands off (``handoff()``) to a specialist whose own read tool answers 20,000,000 characters. Its
final answer is a report, as JSON, of what it was given: each tool output's length, the artifact
digests the outputs name, and the size of its whole input, so a test reads what reached the model
from the task's result.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents import Agent, function_tool, handoff
from agents.items import TResponseOutputItem

from agent_worker import AgentRegistration, effect_tool
from agent_worker.testing import ConversationModel, assistant_message, function_call

HUGE = 20_000_000
SPECIALIST = "deep_reader"
HANDOFF_TOOL = f"transfer_to_{SPECIALIST}"
# One model response: these calls run concurrently inside the turn.
FLOOD: list[tuple[str, dict[str, Any]]] = [
    ("big_text", {"chars": 3_000_000}),
    ("big_text", {"chars": 3_000_001}),
    ("big_text", {"chars": 3_000_002}),
    ("big_text", {"chars": 3_000_003}),
    ("big_table", {"rows": 30, "chars": 100_000}),
    ("big_text", {"chars": 16_000}),  # at the bound: whole
    ("big_text", {"chars": 16_001}),  # one past it: cut
]
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def text_of(chars: int) -> str:
    """``chars`` characters that are not all the same (so a wrong slice would not match)."""
    return ("0123456789abcdef" * (chars // 16 + 1))[:chars]


@function_tool
def big_text(chars: int) -> str:
    """Read a text of ``chars`` characters.

    Args:
        chars: How many characters.
    """
    return text_of(chars)


@function_tool
def big_table(rows: int, chars: int) -> dict[str, str]:
    """Read a table of ``rows`` rows of ``chars`` characters each.

    Args:
        rows: How many rows.
        chars: Characters in each row.
    """
    return {f"row-{i}": text_of(chars) for i in range(rows)}


@function_tool
def deep_text(chars: int) -> str:
    """Read a text of ``chars`` characters, as the specialist.

    Args:
        chars: How many characters.
    """
    return text_of(chars)


@effect_tool(role="agent")
async def big_write(chars: int) -> str:
    """Write, and answer with a text of ``chars`` characters.

    Args:
        chars: How many characters.
    """
    return text_of(chars)


class ReadFloodModel(ConversationModel):
    """Reads huge outputs, hands off, reads more, then reports what it was given (a pure function of
    the conversation)."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        done = sum(1 for item in items if item.get("type") == "function_call")
        if done == 0:
            return [function_call("big_text", {"chars": HUGE}, call_id="read-huge")]
        if done == 1:
            return [function_call(n, a, call_id=f"flood-{i}") for i, (n, a) in enumerate(FLOOD)]
        if done == 1 + len(FLOOD):
            return [function_call("big_write", {"chars": HUGE}, call_id="write-huge")]
        if done == 2 + len(FLOOD):
            return [function_call(HANDOFF_TOOL, {}, call_id="handoff")]
        if done == 3 + len(FLOOD):
            return [function_call("deep_text", {"chars": HUGE}, call_id="deep-huge")]
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
    specialist = Agent(name=SPECIALIST, instructions="Read deeply.", tools=[deep_text])
    return Agent(
        name="read_flooder",
        instructions="Read everything.",
        tools=[big_text, big_table, big_write],
        handoffs=[handoff(specialist)],
    )


registrations = [
    AgentRegistration(
        name="read_flooder",
        build=_build,
        scripted_model=ReadFloodModel,
        scripted_models={SPECIALIST: ReadFloodModel},
    )
]
