"""Candidates and a scorer for shadow-run tests (``agent-worker shadow``).

The recorded tasks are the ``recorder`` agent's (``tests.helpers.agents``): 'record: item-NN', with
'first run: SCRIPT;' a sandbox command before the write. The candidates are ``recorder`` again, with
a script that writes ``item-NN-v2`` instead for the items in ``DIVERGING`` (one tool's arguments
changed for some inputs) and otherwise proposes exactly what the recorded runs did.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel, first_user_text, tool_outputs
from agents import Agent
from agents.items import TResponseOutputItem
from agents.testing import function_call

from tests.helpers.agents import RecorderScript, record_value, run_shell

# The items whose write the candidate changes.
DIVERGING = frozenset({"item-03", "item-07", "item-11", "item-15", "item-19"})
# Where ``score`` logs each task it scores, one task id a line (set by the tests).
SCORE_LOG_ENV = "AW_TEST_SHADOW_SCORE_LOG"
# With this set to a path, the gated candidate's turns for items numbered GATED_FROM and above wait
# until that file exists.
GATE_ENV = "AW_TEST_SHADOW_GATE"
GATED_FROM = 10


class CandidateScript(ConversationModel):
    """The recorder's script, with the write's value changed for the ``DIVERGING`` items."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        if "record_value" in tool_outputs(items):  # the answer, worded as the recorded runs word it
            return RecorderScript().respond(instructions, items)
        prompt = first_user_text(items)
        value = re.search(r"record: (\S+)", prompt).group(1)  # type: ignore[union-attr]
        if value in DIVERGING:
            value = f"{value}-v2"
        calls = []
        if match := re.search(r"first run: (.+?);", prompt):
            calls.append(function_call("run_shell", {"script": match.group(1)}, call_id="call_first"))
        calls.append(function_call("record_value", {"value": value}, call_id="call_record"))
        return calls


class GatedCandidateScript(CandidateScript):
    """``CandidateScript`` whose turns for the items from ``GATED_FROM`` on wait for the gate file."""

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> Any:
        gate = os.environ.get(GATE_ENV)
        text = input if isinstance(input, str) else str(input)
        number = re.search(r"record: item-(\d+)", text)
        if gate and number and int(number.group(1)) >= GATED_FROM:
            while not Path(gate).exists():  # noqa: ASYNC110 (a file another process makes)
                await asyncio.sleep(0.1)
        return await super().get_response(system_instructions, input, *args, **kwargs)


def _recorder() -> Agent:
    return Agent(name="recorder", instructions="Record values.", tools=[run_shell, record_value])


candidate = AgentRegistration(name="recorder", build=_recorder, scripted_model=CandidateScript)
gated_candidate = AgentRegistration(name="recorder", build=_recorder, scripted_model=GatedCandidateScript)


def score(*, task_id: str, prompt: str, recorded: str | None, candidate: str | None) -> tuple[float, str]:
    """1.0 when the candidate's answer is the recorded one, else 0.0; logs the task it scored."""
    log = os.environ.get(SCORE_LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(f"{task_id}\n")
    return (1.0, "same answer") if candidate == recorded else (0.0, "different answer")
