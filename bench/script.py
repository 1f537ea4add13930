"""The scripted conversation every benchmark agent follows, with no dependency but the standard library.

It is imported by our side (``bench.agents``, ``bench.bare``) and by the official plugin's side
(``bench.plugin_side``, which runs in a virtual environment with another openai-agents), so both get
exactly the same model responses for the same conversation.

The prompt says ``count to N``. Each model call looks at how many tool outputs the conversation
holds (``n``): while ``n < N`` it calls ``run_shell`` with ``echo n+1`` (call id ``call_count_n+1``);
then it answers ``counted to N``. A pure function of the conversation, so retries, resumed runs and
another worker all see the same answer.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

TOOL = "run_shell"


@dataclass(frozen=True)
class Move:
    """What the model does next: call ``TOOL`` with ``script`` (under ``call_id``), or answer ``text``."""

    call_id: str | None = None
    script: str | None = None
    text: str | None = None

    @property
    def arguments(self) -> dict[str, str]:
        """The tool call's arguments."""
        assert self.script is not None
        return {"script": self.script}


def target_of(items: list[dict[str, Any]]) -> int:
    """N from the first user message's ``count to N`` (0 when the prompt has none)."""
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            text = content if isinstance(content, str) else str(content)
            match = re.search(r"count to (\d+)", text)
            return int(match.group(1)) if match else 0
    return 0


def next_move(items: list[dict[str, Any]]) -> Move:
    """The model's next move for a conversation given as plain input-item dicts."""
    target = target_of(items)
    done = sum(1 for i in items if i.get("type") == "function_call_output")
    if done < target:
        return Move(call_id=f"call_count_{done + 1}", script=f"echo {done + 1}")
    return Move(text=f"counted to {done}")


def conversation(input: Any) -> list[dict[str, Any]]:
    """A model's ``input`` (a string or input items, dicts or pydantic models) as plain dicts."""
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    plain = []
    for item in input:
        plain.append(item if isinstance(item, dict) else item.model_dump(mode="json", exclude_none=True))
    return plain


async def run_shell(script: str) -> str:
    """What the bare and plugin sides do for a ``TOOL`` call: run ``script`` with ``sh -c`` and
    return its standard output."""
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", script, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return out.decode()
