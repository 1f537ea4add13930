"""Payload contracts: plain JSON that any Temporal client can send and read.

Every model here is a durable contract. Add fields only with defaults; never rename or remove one
without a versioned migration and a replay test.
"""

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
