"""An agent written the way a user writes one, in its own module, loaded only by configuration
(AGENT_WORKER_AGENTS=tests.helpers.user_agents:registration)."""

from __future__ import annotations

import json
from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel, tool_outputs, write_tool
from agent_worker.schemas.actions import BusinessWrite
from agents import Agent, function_tool
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

CUSTOMERS = {"acme": {"id": "C-001", "terms_days": 30}}


@function_tool
def lookup_customer(name: str) -> str:
    """Find a customer's id and payment terms.

    Args:
        name: The customer's name.
    """
    return json.dumps(CUSTOMERS.get(name.lower(), {}))


@write_tool
def file_invoice(customer_id: str, amount: str, terms_days: int) -> BusinessWrite:
    """File an invoice in the billing system.

    Args:
        customer_id: The customer's id.
        amount: The amount, as a decimal string.
        terms_days: Days until payment is due.
    """
    return BusinessWrite(
        record_type="invoice",
        payload={"customer_id": customer_id, "amount": amount, "terms_days": terms_days},
    )


class InvoicerScript(ConversationModel):
    """Looks the customer up, proposes the invoice, then reports the record id."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "lookup_customer" not in outputs:
            return [function_call("lookup_customer", {"name": "acme"}, call_id="call_lookup")]
        customer = json.loads(outputs["lookup_customer"])
        if "file_invoice" not in outputs:
            args = {"customer_id": customer["id"], "amount": "1200.00", "terms_days": customer["terms_days"]}
            return [function_call("file_invoice", args, call_id="call_invoice")]
        receipt = json.loads(outputs["file_invoice"])
        return [assistant_message(f"invoice filed as {receipt.get('record_id')}")]


registration = AgentRegistration(
    name="invoicer",
    build=lambda: Agent(
        name="invoicer", instructions="Invoice customers.", tools=[lookup_customer, file_invoice]
    ),
    scripted_model=InvoicerScript,
    description="Files invoices after a billing clerk approves them.",
)
