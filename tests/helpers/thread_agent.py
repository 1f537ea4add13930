"""An agent with a memory only its conversation gives it, for thread and follow-up input tests.

Told "the code word is X", it notes it. Asked for the code word, it answers with the one it finds in
the user messages it sees, or says it does not know. Told "wait for me", it first asks to run a
command (which the tests' policy gates behind an approval), then answers with what the user added
since.

The ``chatter`` agent takes notes with a read tool, one slow model call a note, all in one turn,
until told "stop now": then it answers how many notes it had taken.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel
from agents import Agent
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

from tests.helpers.agents import note, run_shell

CODE_WORD = re.compile(r"code word is (\w+)", re.I)


def _user_texts(items: list[dict[str, Any]]) -> list[str]:
    return [
        i["content"] if isinstance(i.get("content"), str) else json.dumps(i.get("content"))
        for i in items
        if i.get("role") == "user"
    ]


class MemoryScript(ConversationModel):
    """Answers from the conversation alone (see the module docstring)."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        users = _user_texts(items)
        ran = any(i.get("type") == "function_call_output" for i in items)
        if "wait for me" in users[-1] and not ran:
            return [function_call("run_shell", {"script": "echo waited"}, call_id="call_wait")]
        if ran and "wait for me" in "".join(users):
            after = users[[n for n, u in enumerate(users) if "wait for me" in u][-1] + 1 :]
            return [assistant_message("heard: " + " | ".join(after) if after else "heard nothing")]
        if "what is the code word" in users[-1].lower():
            words = [m.group(1) for u in users for m in CODE_WORD.finditer(u)]
            return [
                assistant_message(f"the code word is {words[-1]}" if words else "I do not know the code word")
            ]
        return [assistant_message("noted")]


NOTES = 40


class ChatterScript(ConversationModel):
    """Notes until told to stop (see the module docstring); each call takes 0.3 s without blocking."""

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.3)
        return await super().get_response(*args, **kwargs)

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        done = sum(1 for i in items if i.get("type") == "function_call_output")
        if any("stop now" in u for u in _user_texts(items)):
            return [assistant_message(f"stopped after {done} notes")]
        if done < NOTES:
            return [function_call("note", {"index": done}, call_id=f"call_note_{done}")]
        return [assistant_message(f"took {done} notes")]


registrations = [
    AgentRegistration(
        name="memory",
        build=lambda: Agent(name="memory", instructions="Remember what you are told.", tools=[run_shell]),
        scripted_model=MemoryScript,
    ),
    AgentRegistration(
        name="chatter",
        build=lambda: Agent(name="chatter", instructions="Take notes.", tools=[note]),
        scripted_model=ChatterScript,
        max_model_calls=NOTES + 5,
    ),
]
