"""The ``recorder`` agent as later releases of it, for remembered grants (``tests/test_grants.py``):
one whose ``record_value`` takes another argument (its schema changed), one that declares a new
version. A worker serving one of these in place of ``tests.helpers.agents`` runs "the next release"."""

from __future__ import annotations

from agent_worker.activities.agent import AgentRegistration, write_tool
from agent_worker.schemas.actions import BusinessWrite
from agents import Agent

from tests.helpers.agents import RecorderScript, run_shell
from tests.helpers.agents import record_value as record_value_v1


@write_tool
def record_value(value: str, note: str = "") -> BusinessWrite:
    """Record a value in the business system.

    Args:
        value: The value.
        note: A note kept with it.
    """
    return BusinessWrite(record_type="value", payload={"value": value, "note": note})


schema_changed = [
    AgentRegistration(
        name="recorder",
        build=lambda: Agent(name="recorder", instructions="Record values.", tools=[run_shell, record_value]),
        scripted_model=RecorderScript,
    )
]
version_changed = [
    AgentRegistration(
        name="recorder",
        build=lambda: Agent(
            name="recorder", instructions="Record values.", tools=[run_shell, record_value_v1]
        ),
        scripted_model=RecorderScript,
        version="2",
    )
]
