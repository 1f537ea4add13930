"""Validating raw JSON at the entry points, with errors that name the field at fault."""

from __future__ import annotations

import re
from typing import Any

from agent_worker.schemas.approvals import ApprovalDecision
from agent_worker.schemas.tasks import TASK_ID_PATTERN, TASK_ID_RULE, FollowUp, TaskInput, TaskState
from pydantic import BaseModel, ValidationError


class InvalidPayload(ValueError):
    """Raised when raw input does not match its contract; the message names each bad field."""


def describe(err: ValidationError, prefix: str = "") -> str:
    """One line per problem: ``field.path: message``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if p != "__root__")
        where = ".".join(p for p in (prefix, loc) if p) or "(input)"
        lines.append(f"{where}: {e['msg']}")
    return "; ".join(lines)


def _parse(model: type[BaseModel], raw: Any, what: str, prefix: str = "") -> Any:
    if not isinstance(raw, dict):
        raise InvalidPayload(f"{what} must be a JSON object, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise InvalidPayload(f"invalid {what}: {describe(err, prefix)}") from None


def parse_task_input(raw: Any) -> TaskInput:
    """Accept ``{"spec": {...}, "state": ...}`` or a bare TaskSpec object.

    Raises:
        InvalidPayload: naming every field at fault.
    """
    if isinstance(raw, dict) and "spec" not in raw:
        raw = {"spec": raw}
    state = raw.get("state") if isinstance(raw, dict) else None
    version = state.get("schema_version") if isinstance(state, dict) else None
    if type(version) is int and version > TaskState.model_fields["schema_version"].default:
        # State written by newer code need not parse here; its version alone says this worker must
        # not continue it (the workflow hands the task off, and the full state stays in the history).
        raw = {**raw, "state": {"schema_version": version}}
    return _parse(TaskInput, raw, "task input")


def parse_follow_up(raw: Any) -> FollowUp:
    """Validate a raw ``add_input`` payload (``{"text": ..., "principal": ...}`` or a bare string).

    Raises:
        InvalidPayload: naming every field at fault.
    """
    if isinstance(raw, str):
        raw = {"text": raw}
    return _parse(FollowUp, raw, "input")


def parse_decision(raw: Any) -> ApprovalDecision:
    """Validate a raw approval decision.

    Raises:
        InvalidPayload: naming every field at fault.
    """
    return _parse(ApprovalDecision, raw, "decision")


def check_task_id(task_id: Any, field: str = "task_id") -> str:
    """``task_id`` if it is a valid task id (``schemas.tasks.TASK_ID_PATTERN``), the one check that
    the client, the CLI and the API make before starting a task.

    Raises:
        InvalidPayload: naming ``field`` and the rule, with the refused id shown escaped (a line break
            in it is printed as ``\\r\\n``, never as one).
    """
    if isinstance(task_id, str) and re.fullmatch(TASK_ID_PATTERN, task_id):
        return task_id
    raise InvalidPayload(f"invalid {field}: {task_id!r} must be {TASK_ID_RULE}")
