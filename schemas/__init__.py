"""Payload contracts: plain JSON that any Temporal client can send and read.

Every model here is a durable contract. Add fields only with defaults; never rename or remove one
without a versioned migration and a replay test.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported on first use (PEP 562): a module that needs one contract (``schemas.visibility``,
# ``schemas.config``, as the task client does) must not build every pydantic model.
_EXPORTS = {
    "ActionResult": "schemas.actions",
    "ActionStatus": "schemas.actions",
    "BusinessWrite": "schemas.actions",
    "EffectClass": "schemas.actions",
    "ProposedAction": "schemas.actions",
    "SandboxCommand": "schemas.actions",
    "action_version": "schemas.actions",
    "ApprovalDecision": "schemas.approvals",
    "ApprovalRequest": "schemas.approvals",
    "DecisionKind": "schemas.approvals",
    "DecisionOutcome": "schemas.approvals",
    "DecisionRecord": "schemas.approvals",
    "IgnoredDecision": "schemas.approvals",
    "ArtifactRef": "schemas.artifacts",
    "InputFile": "schemas.artifacts",
    "Event": "schemas.events",
    "EventType": "schemas.events",
    "Budgets": "schemas.tasks",
    "Evidence": "schemas.tasks",
    "PolicyRule": "schemas.tasks",
    "PolicySpec": "schemas.tasks",
    "PolicyVerdict": "schemas.tasks",
    "TaskInput": "schemas.tasks",
    "TaskPhase": "schemas.tasks",
    "TaskResult": "schemas.tasks",
    "TaskSpec": "schemas.tasks",
    "TaskState": "schemas.tasks",
    "TaskStatus": "schemas.tasks",
}

if TYPE_CHECKING:
    from schemas.actions import (
        ActionResult,
        ActionStatus,
        BusinessWrite,
        EffectClass,
        ProposedAction,
        SandboxCommand,
        action_version,
    )
    from schemas.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        DecisionKind,
        DecisionOutcome,
        DecisionRecord,
        IgnoredDecision,
    )
    from schemas.artifacts import ArtifactRef, InputFile
    from schemas.events import Event, EventType
    from schemas.tasks import (
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


def __getattr__(name: str) -> Any:
    """Import an exported name from its module on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not exported here (nor a submodule already imported).
    """
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
