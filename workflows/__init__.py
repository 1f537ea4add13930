"""Workflows: each task's lifecycle. ``AgentTaskWorkflow`` (type ``AgentTask``) is the one entry."""

from workflows.agent_task import AgentTaskWorkflow

__all__ = ["AgentTaskWorkflow"]
