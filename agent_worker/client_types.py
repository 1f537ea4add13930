"""What the task client's calls answer, beyond the payload models: a started task's reference and a
task waiting for a human. In a module of their own so that the parts the client is made of
(``client_decisions``, ``client_forks``) can name them without importing the client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_worker.schemas.approvals import ApprovalRequest
    from agent_worker.schemas.tasks import BatchView, TaskPhase

__all__ = ["AwaitingTask", "TaskRef"]


@dataclass(frozen=True)
class TaskRef:
    """A started (or already existing) task."""

    task_id: str
    run_id: str | None
    started: bool  # False when a task with this id already existed: it was not started again


@dataclass
class AwaitingTask:
    """A task waiting for a human, with the requests the caller may decide."""

    task_id: str
    tenant: str
    agent: str
    requests: list[ApprovalRequest] = field(default_factory=list)
    error: str | None = None  # its worker did not answer: only what visibility knows is shown
    approvers: list[str] = field(default_factory=list)  # from visibility: who may decide its requests
    phase: TaskPhase | None = None  # from the status query (None when its worker did not answer)
    prompt: str = ""  # the task's prompt, cut (from the status query)
    batch: list[BatchView] = field(default_factory=list)  # the model response's calls and results
