"""Payload contracts: plain JSON that any Temporal client can send and read.

Every model here is a durable contract. Add fields only with defaults; never rename or remove one
without a versioned migration and a replay test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_worker.schemas.lazy import lazy_exports

# Imported on first use (PEP 562): a module that needs one contract (``schemas.visibility``,
# ``schemas.config``, as the task client does) must not build every pydantic model.
_EXPORTS = {
    "ActionResult": "agent_worker.schemas.actions",
    "ActionStatus": "agent_worker.schemas.actions",
    "BusinessWrite": "agent_worker.schemas.actions",
    "EffectClass": "agent_worker.schemas.actions",
    "ProposedAction": "agent_worker.schemas.actions",
    "SandboxCommand": "agent_worker.schemas.actions",
    "action_version": "agent_worker.schemas.actions",
    "ApprovalDecision": "agent_worker.schemas.approvals",
    "ApprovalRequest": "agent_worker.schemas.approvals",
    "DecisionKind": "agent_worker.schemas.approvals",
    "DecisionOutcome": "agent_worker.schemas.approvals",
    "DecisionRecord": "agent_worker.schemas.approvals",
    "IgnoredDecision": "agent_worker.schemas.approvals",
    "ArtifactRef": "agent_worker.schemas.artifacts",
    "InputFile": "agent_worker.schemas.artifacts",
    "Event": "agent_worker.schemas.events",
    "EventType": "agent_worker.schemas.events",
    "Budgets": "agent_worker.schemas.tasks",
    "Evidence": "agent_worker.schemas.tasks",
    "PolicyRule": "agent_worker.schemas.tasks",
    "PolicySpec": "agent_worker.schemas.tasks",
    "PolicyVerdict": "agent_worker.schemas.tasks",
    "TaskInput": "agent_worker.schemas.tasks",
    "TaskPhase": "agent_worker.schemas.tasks",
    "TaskResult": "agent_worker.schemas.tasks",
    "TaskSpec": "agent_worker.schemas.tasks",
    "TaskState": "agent_worker.schemas.tasks",
    "TaskStatus": "agent_worker.schemas.tasks",
}

if TYPE_CHECKING:
    from agent_worker.schemas.actions import (
        ActionResult,
        ActionStatus,
        BusinessWrite,
        EffectClass,
        ProposedAction,
        SandboxCommand,
        action_version,
    )
    from agent_worker.schemas.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        DecisionKind,
        DecisionOutcome,
        DecisionRecord,
        IgnoredDecision,
    )
    from agent_worker.schemas.artifacts import ArtifactRef, InputFile
    from agent_worker.schemas.events import Event, EventType
    from agent_worker.schemas.tasks import (
        Budgets,
        Evidence,
        PolicyRule,
        PolicySpec,
        PolicyVerdict,
        TaskInput,
        TaskPhase,
        TaskResult,
        TaskSpec,
        TaskState,
        TaskStatus,
    )


__all__ = [
    "ActionResult",
    "ActionStatus",
    "ApprovalDecision",
    "ApprovalRequest",
    "ArtifactRef",
    "Budgets",
    "BusinessWrite",
    "DecisionKind",
    "DecisionOutcome",
    "DecisionRecord",
    "EffectClass",
    "Event",
    "EventType",
    "Evidence",
    "IgnoredDecision",
    "InputFile",
    "PolicyRule",
    "PolicySpec",
    "PolicyVerdict",
    "ProposedAction",
    "SandboxCommand",
    "TaskInput",
    "TaskPhase",
    "TaskResult",
    "TaskSpec",
    "TaskState",
    "TaskStatus",
    "action_version",
]


__getattr__ = lazy_exports(globals(), _EXPORTS)
