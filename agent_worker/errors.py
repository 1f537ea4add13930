"""The client's errors, in a module of their own: the task client (``agent_worker.client``, with the
decision path and the fork calls it is made of) and the schedule client it hands out
(``agent_worker.schedules``, ``AgentWorkerClient.schedules``) all raise them, and none can import
another for them without an import cycle. ``agent_worker.client`` and ``agent_worker`` export them;
import them from there."""

from __future__ import annotations

__all__ = [
    "AgentWorkerError",
    "DecisionRefused",
    "TaskEnded",
    "TaskNotFound",
    "WorkerUnreachable",
    "cause_message",
]


class AgentWorkerError(Exception):
    """The root of this client's errors."""


class TaskNotFound(AgentWorkerError):
    """Raised when no task has the id (or, for a signal or cancel, none is running under it)."""


class TaskEnded(AgentWorkerError):
    """Raised by ``result`` when the task closed without a result (failed, cancelled, terminated)."""


class DecisionRefused(AgentWorkerError):
    """Raised when the task refuses a decision: stale version, unknown or decided request, a
    principal not allowed, a bad signature, an edit the tool refuses. ``reason`` is the task's word."""

    def __init__(self, task_id: str, request_id: str, reason: str) -> None:
        super().__init__(f"task {task_id} refused the decision on {request_id}: {reason}")
        self.task_id = task_id
        self.request_id = request_id
        self.reason = reason


class WorkerUnreachable(AgentWorkerError):
    """Raised when no worker answered a query or an update in time. The task is not
    changed: an update that arrives later carries ``expires_at`` and the task refuses it.
    ``stage`` is ``read`` when ``submit``'s read went unanswered (nothing was signed or sent)."""

    stage: str = "send"


def cause_message(err: BaseException) -> str:
    """The message of what caused ``err`` (a workflow's or an update's failure), else its own."""
    cause = getattr(err, "cause", None) or err
    return getattr(cause, "message", None) or str(cause)
