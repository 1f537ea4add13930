"""``TaskContext``: what the workflow's helpers (approvals, effects, evidence, placement) see of the
task they work for. Narrow on purpose: the task's identity, its spec and state, and the three ways it
records what happens. Each helper is handed the other helpers it needs by keyword, so no helper
imports the workflow and the workflow's own methods stay its own. Workflow code: deterministic."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # payload models and helpers: one copy for all runs
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import FIRST_RELEASE, Release, TaskPhase, TaskSpec, TaskState


class Emit(Protocol):
    """Records an event of ``type`` with ``data`` in the task's state (``EventLog.emit``)."""

    def __call__(self, type: EventType, /, **data: Any) -> None: ...


@dataclass(frozen=True, kw_only=True)
class TaskContext:
    """One task as its helpers see it. ``state`` is the task's live state (the same object the
    workflow holds and continue-as-new carries), so what a helper changes there the task keeps.

    Attributes:
        task_id: The workflow id (the client's task id).
        spec: The task's spec; None only when its input was invalid (``input_error`` says why).
        state: The task's state.
        input_error: Why the task's input was refused, or None.
        emit: Records an event in the state's tail.
        emit_ignored: Records ignored input, bounded per delivery (``EventLog.emit_ignored``).
        set_phase: Enters a phase (and publishes it to visibility).
        release: The release line the task's run chain began on (``TaskInput.release``; 0.1 when its
            input named none).
    """

    task_id: str
    spec: TaskSpec | None
    state: TaskState
    input_error: str | None
    emit: Emit
    emit_ignored: Emit
    set_phase: Callable[[TaskPhase], None]
    release: Release = FIRST_RELEASE

    @property
    def valid_spec(self) -> TaskSpec:
        """The task's spec (only a task whose input was valid runs effects, approvals or evidence)."""
        assert self.spec is not None
        return self.spec

    @property
    def input_release(self) -> Release | None:
        """The release the inputs this task sends on (continue-as-new, sub-tasks) carry: its own, and
        none for 0.1, whose inputs never named one (so a 0.1 worker still reads them)."""
        return None if self.release == FIRST_RELEASE else self.release


__all__ = ["Emit", "TaskContext"]
