"""A triage agent that hands off (an SDK ``handoff()``) to a ledger specialist, each answering
with its own scripted model. Only the specialist has the write tool, so planning, edits and the
write itself must find the tool on the agent the handoff reached."""

from __future__ import annotations

import json
import re
from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel, tool_outputs, write_tool
from agent_worker.schemas.actions import BusinessWrite
from agents import Agent, handoff
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

from agent_worker import effect_tool

TRIAGE = "triage"
SPECIALIST = "ledger_specialist"
HANDOFF_TOOL = f"transfer_to_{SPECIALIST}"


@write_tool
def book_entry(amount: int, memo: str) -> BusinessWrite:
    """Book a ledger entry.

    Args:
        amount: The amount, in cents; positive.
        memo: What it is for.
    """
    if amount <= 0:
        raise ValueError("amount must be positive")
    # The planner marks what it planned, so an edit planned by another tool would show.
    return BusinessWrite(
        record_type="ledger_entry", payload={"amount": amount, "memo": memo, "planned_by": SPECIALIST}
    )


# The stamps the specialist's own effect tool made in this process: (operation key, memo).
STAMPS: list[tuple[str, str]] = []


@effect_tool(key_parameter="request_key", role="agent")
async def stamp(memo: str, request_key: str) -> str:
    """Stamp a memo in the ledger.

    Args:
        memo: What to stamp.
    """
    STAMPS.append((request_key, memo))
    return f"stamped {memo}"


def _prompt(items: list[dict[str, Any]]) -> str:
    return next(str(i.get("content")) for i in items if i.get("role") == "user")


class TriageScript(ConversationModel):
    """Hands every request to the ledger specialist; answers after that only if the run wrongly came
    back to it (which the tests would see in the final output)."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        if any(i.get("type") == "function_call" and i.get("name") == HANDOFF_TOOL for i in items):
            return [assistant_message("triage answered after the handoff")]
        return [function_call(HANDOFF_TOOL, {}, call_id="call_handoff")]


class SpecialistScript(ConversationModel):
    """Books the amount after 'book:' in the prompt (or stamps the memo after 'stamp:' with its own
    effect tool), then reports the outcome."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "stamp" in outputs:
            return [assistant_message(f"specialist: {outputs['stamp']}")]
        if match := re.search(r"stamp: (\w+)", _prompt(items)):
            return [function_call("stamp", {"memo": match.group(1)}, call_id="call_stamp")]
        if "book_entry" in outputs:
            output = outputs["book_entry"]
            seen = json.loads(output) if output.startswith("{") else {}
            receipt = seen.get("result", seen)  # an edited call's output wraps the receipt
            return [assistant_message(f"specialist booked {receipt.get('record_id', output)}")]
        amount = int(re.search(r"book: (\d+)", _prompt(items)).group(1))  # type: ignore[union-attr]
        return [function_call("book_entry", {"amount": amount, "memo": "from triage"}, call_id="call_book")]


def build_triage() -> Agent:
    specialist = Agent(name=SPECIALIST, instructions="Book ledger entries.", tools=[book_entry, stamp])
    return Agent(
        name=TRIAGE, instructions="Send ledger work to the specialist.", handoffs=[handoff(specialist)]
    )


registrations = [
    AgentRegistration(
        name=TRIAGE,
        build=build_triage,
        scripted_model=TriageScript,
        scripted_models={SPECIALIST: SpecialistScript},
    )
]
