"""Takeover after a worker loss: a turn or command whose attempt took over from a worker that
stopped answering (``takeover_seconds`` on its result, measured by the activity from the lost
worker's last heartbeat to its own start) is counted in the task's usage, recorded as an event and
observed by the metric ``agent_worker_takeover_seconds``. Workflow code: deterministic."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.events import EventType
    from agent_worker.telemetry import metrics

from agent_worker.workflows.context import TaskContext


def record_takeover(task: TaskContext, work: str, seconds: float | None, **data: object) -> None:
    """Account a takeover of ``work`` (``turn`` or ``command``) that took ``seconds`` (None: the
    work ran without one)."""
    if seconds is None:
        return
    usage, spec = task.state.usage, task.valid_spec
    usage.takeovers += 1
    usage.takeover_seconds += seconds
    task.emit(EventType.WORK_TAKEN_OVER, work=work, seconds=seconds, **data)
    metrics.workflow_histogram(
        "agent_worker_takeover_seconds", seconds, agent=spec.agent, tenant=spec.tenant, work=work
    )


__all__ = ["record_takeover"]
