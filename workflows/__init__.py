"""Workflows: ``AgentTaskWorkflow`` (type ``AgentTask``) owns each task's lifecycle;
``SandboxReaperWorkflow`` (type ``SandboxReaper``) removes orphaned sandboxes on a schedule."""

from workflows.agent_task import AgentTaskWorkflow
from workflows.reaper import SandboxReaperWorkflow

__all__ = ["AgentTaskWorkflow", "SandboxReaperWorkflow"]
