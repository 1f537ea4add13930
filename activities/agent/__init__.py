"""The agent kernel: OpenAI Agents SDK turns as activities, effectful tools, registries, models."""

from agent_worker.activities.agent.ask import ask_human
from agent_worker.activities.agent.models import ConversationModel, first_user_text, tool_outputs
from agent_worker.activities.agent.registry import AgentRegistration, AgentRegistry
from agent_worker.activities.agent.tools import current_turn, delegate_tool, sandbox_tool, write_tool
from agent_worker.activities.agent.turn import AgentActivities

__all__ = [
    "AgentActivities",
    "AgentRegistration",
    "AgentRegistry",
    "ConversationModel",
    "ask_human",
    "current_turn",
    "delegate_tool",
    "first_user_text",
    "sandbox_tool",
    "tool_outputs",
    "write_tool",
]
