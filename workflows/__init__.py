"""Workflows: ``AgentTaskWorkflow`` (type ``AgentTask``) owns each task's lifecycle;
``SandboxReaperWorkflow`` (type ``SandboxReaper``) removes orphaned sandboxes on a schedule;
``FleetDoctorWorkflow`` (type ``FleetDoctor``) checks the running tasks on a schedule."""

from workflows.agent_task import AgentTaskWorkflow
from workflows.doctor import FleetDoctorWorkflow
from workflows.reaper import SandboxReaperWorkflow

__all__ = ["AgentTaskWorkflow", "FleetDoctorWorkflow", "SandboxReaperWorkflow"]
