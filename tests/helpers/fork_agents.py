"""Agents for the fork tests (tests/test_forks.py), each a deterministic function of its conversation.

``ledger`` records the value after 'record:' in the prompt (a business write, approval required by
the tests' policy); told '... then fail', its final step fails for good once the write is done.
``builder`` writes a file in its sandbox (step 1), reads it back (step 2), and answers with what it
read (step 3).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel, tool_outputs
from agent_worker.activities.errors import AgentError
from agents import Agent
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

from tests.helpers.agents import record_value, run_shell

MAKE = "echo built-at-step-1 > made.txt"
CHECK = "cat made.txt"


def _first_user_text(items: list[dict[str, Any]]) -> str:
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


class LedgerScript(ConversationModel):
    """Step 1 proposes the write; step 2 answers with the receipt, or fails for good when told to."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        prompt = _first_user_text(items)
        outputs = tool_outputs(items)
        if "record_value" not in outputs:
            value = re.search(r"record: (\S+)", prompt).group(1)  # type: ignore[union-attr]
            return [function_call("record_value", {"value": value}, call_id="call_record")]
        if "then fail" in prompt:
            raise AgentError(
                "the final step failed (as the test asked)", operation="agent.turn", retryable="no"
            )
        receipt = json.loads(outputs["record_value"])
        return [assistant_message(f"recorded as {receipt['record_id']}")]


class BuilderScript(ConversationModel):
    """Writes a file (step 1), reads it (step 2), answers with what it read (step 3)."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        printed = [json.loads(i["output"]) for i in items if i.get("type") == "function_call_output"]
        if not printed:
            return [function_call("run_shell", {"script": MAKE}, call_id="call_make")]
        if len(printed) == 1:
            return [function_call("run_shell", {"script": CHECK}, call_id="call_check")]
        last = printed[-1]
        return [assistant_message(f"file says: {last['stdout'].strip() or last['stderr'].strip()}")]


registrations = [
    AgentRegistration(
        name="ledger",
        build=lambda: Agent(name="ledger", instructions="Record values.", tools=[record_value]),
        scripted_model=LedgerScript,
    ),
    AgentRegistration(
        name="builder",
        build=lambda: Agent(name="builder", instructions="Build things.", tools=[run_shell]),
        scripted_model=BuilderScript,
    ),
]
