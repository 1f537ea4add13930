"""An agent that asks a person (the built-in ``ask_human``), with a deterministic model that repeats,
word for word, the tool output it received."""

from __future__ import annotations

from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel, ask_human, tool_outputs
from agents import Agent
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

# What the asker's prompt ('ask form', 'ask choice', 'ask text') makes it ask.
PAYMENT_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "minimum": 0},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
    },
    "required": ["amount", "currency"],
    "additionalProperties": False,
}
QUESTIONS: dict[str, dict[str, Any]] = {
    "ask form": {"question": "How much should we pay?", "answer_type": "form", "form_schema": PAYMENT_FORM},
    "ask choice": {
        "question": "Which report period?",
        "answer_type": "choice",
        "options": ["monthly", "quarterly"],
    },
    "ask text": {"question": "Who is the report for?"},
}
SAW = "the person's answer reached me as: "


class AskerScript(ConversationModel):
    """Asks the question its prompt names, then answers with exactly the output it received."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "ask_human" in outputs:
            return [assistant_message(SAW + outputs["ask_human"])]
        prompt = next(i["content"] for i in items if i.get("role") == "user")
        return [function_call("ask_human", QUESTIONS[prompt.strip()], call_id="call_ask")]


registrations = [
    AgentRegistration(
        name="asker",
        build=lambda: Agent(name="asker", instructions="Ask when unsure.", tools=[ask_human]),
        scripted_model=AskerScript,
    )
]
