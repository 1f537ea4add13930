"""The built-in ``remember`` and ``recall`` tools: an agent's memory across tasks.

An agent opts in by adding them to its tools::

    Agent(name="assistant", tools=[*memory_tools("assistant"), ...])

``remember(fact)`` is a write tool: a ``BusinessWrite`` of record type ``memory.fact`` to the
business system ``memory`` (``activities.stores.memory``). Like every write it goes through the
task's policy (a write needs approval unless a rule allows it: ``{"tool": "remember", "verdict":
"allow"}``), runs once under its operation key, and is in the evidence. A fact over
``MAX_FACT_CHARS`` characters (or empty) is refused before anything runs; the model reads why.

``recall(query)`` is a read tool: it runs inside the turn and returns the best matches among the
facts this agent remembered in the task's tenant, as numbered lines, bounded (see
``activities.stores.memory``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent_worker.activities.agent.tools import current_turn, write_tool
from agent_worker.activities.errors import ToolPlanError
from agent_worker.activities.stores.memory import MAX_FACT_CHARS, MEMORY_RECORD_TYPE, MEMORY_SYSTEM
from agent_worker.schemas.actions import BusinessWrite
from agents import FunctionTool, function_tool

NOTHING_FOUND = "no remembered facts match"


def memory_tools(agent: str) -> list[FunctionTool]:
    """``remember`` and ``recall`` for the agent registered as ``agent`` (the memory's scope within
    a tenant: agents that pass the same name share their memory)."""

    @write_tool
    def remember(fact: str) -> BusinessWrite:
        """Remember a fact for later tasks (a short sentence; it can be recalled by its words)."""
        text = fact.strip()
        if not text:
            raise ToolPlanError("remember refused: the fact is empty", operation="agent.plan")
        if len(text) > MAX_FACT_CHARS:
            raise ToolPlanError(
                f"remember refused: the fact is {len(text)} characters; the limit is {MAX_FACT_CHARS}. "
                "Remember a shorter summary.",
                operation="agent.plan",
            )
        return BusinessWrite(
            record_type=MEMORY_RECORD_TYPE, payload={"agent": agent, "fact": text}, system=MEMORY_SYSTEM
        )

    @function_tool
    async def recall(query: str) -> str:
        """Recall facts remembered in earlier tasks that match the words of ``query``."""
        services = current_turn()
        if services.memory is None:
            return "memory is not available on this worker"
        store: Any = services.memory()
        facts = await asyncio.to_thread(store.recall, services.tenant, agent, query)
        if not facts:
            return NOTHING_FOUND
        return "\n".join(f"{i}. {f.fact}" for i, f in enumerate(facts, 1))

    return [remember, recall]


__all__ = ["NOTHING_FOUND", "memory_tools"]
