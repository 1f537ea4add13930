"""A scripted agent with memory (``memory_tools``), and a memory system that can crash mid-write.

The ``memo`` agent's prompt says what to do: ``remember: FACT`` calls ``remember`` and answers
``remembered: <the tool's output>``; ``recall: QUERY`` calls ``recall`` and answers
``recalled: <the tool's output>`` (so the task's output is what the model was given).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel, tool_outputs
from agent_worker.activities.stores.memory import build_memory_store
from agent_worker.schemas.config import WorkerConfig
from agents import Agent
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

from agent_worker import memory_tools
from tests.helpers.agents import _user_texts
from tests.helpers.faults import FaultyWriter


class MemoScript(ConversationModel):
    """Remembers or recalls what the prompt says, then reports the tool's output."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        for tool in ("remember", "recall"):
            if tool in outputs:
                return [assistant_message(f"{tool}ed: {outputs[tool]}")]
        prompt = _user_texts(items)[0]
        if match := re.search(r"remember: (.+)", prompt, re.DOTALL):
            return [function_call("remember", {"fact": match.group(1)}, call_id="call_remember")]
        query = re.search(r"recall: (.+)", prompt).group(1)  # type: ignore[union-attr]
        return [function_call("recall", {"query": query}, call_id="call_recall")]


registrations = [
    AgentRegistration(
        name="memo",
        build=lambda: Agent(name="memo", instructions="Remember and recall.", tools=memory_tools("memo")),
        scripted_model=MemoScript,
    ),
]


def faulty_memory(config: WorkerConfig) -> FaultyWriter:
    """The configured memory store wrapped with the faults named by ``AW_FAULTS``
    (``tests.helpers.faults``): with ``crash``, the worker is SIGKILLed right after the commit."""
    return FaultyWriter(
        build_memory_store(config), os.environ.get("AW_FAULTS", "none"), Path(os.environ["AW_FAULT_DIR"])
    )
