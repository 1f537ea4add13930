"""Agents that exist only for tests, with deterministic conversation models."""

from __future__ import annotations

from typing import Any

from agents import Agent
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

from activities.agent import AgentRegistration, ConversationModel, sandbox_tool, tool_outputs
from schemas.actions import SandboxCommand


@sandbox_tool
def run_shell(script: str) -> SandboxCommand:
    """Run a shell script in the sandbox.

    Args:
        script: The script, run by sh -c.
    """
    return SandboxCommand(argv=["sh", "-c", script])


class ShellScript(ConversationModel):
    """Runs the script given after 'run:' in the prompt once, then reports its output."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "run_shell" in outputs:
            return [assistant_message(f"shell said: {outputs['run_shell']}")]
        prompt = str(items[0].get("content", ""))
        script = prompt.split("run:", 1)[1].strip() if "run:" in prompt else "true"
        return [function_call("run_shell", {"script": script}, call_id="call_shell")]


registrations = [
    AgentRegistration(
        name="shell",
        build=lambda: Agent(name="shell", instructions="Run what you are asked.", tools=[run_shell]),
        scripted_model=ShellScript,
    ),
]
