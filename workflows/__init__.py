"""Workflows: ``AgentTaskWorkflow`` (type ``AgentTask``) owns each task's lifecycle;
``SandboxReaperWorkflow`` (type ``SandboxReaper``) removes orphaned sandboxes on a schedule;
``FleetDoctorWorkflow`` (type ``FleetDoctor``) checks the running tasks on a schedule;
``ShadowRunWorkflow`` (type ``ShadowRun``) replays recorded tasks with a candidate agent, one
``ShadowTaskWorkflow`` (type ``ShadowTask``) child per task, without business effects.

The classes are imported on first use (PEP 562): a process that needs one pure module of the
package (``workflows.policy`` for ``agent-worker policy simulate``) does not load every workflow and
the Agents SDK behind them.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from agent_worker.schemas.lazy import lazy_exports

if TYPE_CHECKING:
    from agent_worker.workflows.agent_task import AgentTaskWorkflow
    from agent_worker.workflows.doctor import FleetDoctorWorkflow
    from agent_worker.workflows.reaper import SandboxReaperWorkflow
    from agent_worker.workflows.shadow import ShadowRunWorkflow
    from agent_worker.workflows.shadow_task import ShadowTaskWorkflow

# Read-only: with ``workflows`` passed through the sandbox, every task on a worker shares module state.
_EXPORTS = MappingProxyType(
    {
        "AgentTaskWorkflow": "agent_worker.workflows.agent_task",
        "FleetDoctorWorkflow": "agent_worker.workflows.doctor",
        "SandboxReaperWorkflow": "agent_worker.workflows.reaper",
        "ShadowRunWorkflow": "agent_worker.workflows.shadow",
        "ShadowTaskWorkflow": "agent_worker.workflows.shadow_task",
    }
)


__getattr__ = lazy_exports(globals(), _EXPORTS)


__all__ = [
    "AgentTaskWorkflow",
    "FleetDoctorWorkflow",
    "SandboxReaperWorkflow",
    "ShadowRunWorkflow",
    "ShadowTaskWorkflow",
]
