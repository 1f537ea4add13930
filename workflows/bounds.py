"""Size bounds on everything a task sends to Temporal.

Temporal refuses a payload over 2 MB (and a workflow task's reply over 4 MB). A refused activity
input, child input, continue-as-new input or workflow result fails the workflow task, and its retry
builds the same payload again: the task would be stuck for good. So every payload the workflow
builds is bounded where it is built (fields capped at the entry points, outputs kept by reference),
and this module is the last guard: a payload still over the limit ends the task ``handed_off`` with a
small result that names the limit, before anything is sent. Workflow code: deterministic.
"""

from __future__ import annotations

from typing import Any

from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.patches import BOUNDED_PATCH  # re-exported: the patch that guards these bounds
from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # payload models and helpers: one copy for all runs
    from agent_worker.schemas.tasks import TaskResult
    from agent_worker.schemas.validation import InvalidPayload

# Room under Temporal's 2 MB for the envelope, the headers and the other commands of the reply.
MAX_PAYLOAD_BYTES = 1_500_000
# Event data strings (reasons, errors) are cut to this many characters: events are read by people and
# dashboards, and every event travels in the task's state until it is delivered.
EVENT_TEXT_CHARS = 2_000
# A task's spec travels in every turn's input and every continue-as-new: a client's is refused above this.
MAX_SPEC_BYTES = 512_000
# Strings kept from a refused payload (an ignored decision's fields), and the reason it was ignored.
KEPT_TEXT_CHARS = 200
IGNORED_REASON_CHARS = 800


class PayloadTooLarge(HandOff):
    """A payload the task was about to send is over ``MAX_PAYLOAD_BYTES``."""


def size_of(payload: BaseModel) -> int:
    """The payload's size as JSON, in bytes (what the data converter sends, near enough)."""
    return len(payload.__pydantic_serializer__.to_json(payload))


def check(what: str, payload: BaseModel, limit: int = MAX_PAYLOAD_BYTES) -> None:
    """Hand the task off, explained, when ``payload`` is too large to send.

    Raises:
        PayloadTooLarge: naming ``what``, its size and the limit.
    """
    size = size_of(payload)
    if size > limit:
        raise PayloadTooLarge(
            f"{what} would be {size:,} bytes, more than the {limit:,}-byte limit on what a task sends "
            f"to Temporal (payloads over 2 MB are refused)"
        )


def check_spec(spec: BaseModel) -> None:
    """Refuse a client's spec too large for the task to carry.

    Raises:
        InvalidPayload: naming the size and the limit.
    """
    size = size_of(spec)
    if size > MAX_SPEC_BYTES:
        raise InvalidPayload(
            f"invalid task input: spec: {size:,} bytes as JSON, more than the {MAX_SPEC_BYTES:,} a task "
            "carries (its prompt and spec travel in every turn); pass large documents as inputs"
        )


def slim_result(result: TaskResult, size: int) -> TaskResult:
    """``result`` without its inline evidence lists (they are in the history and the event sink),
    saying so in ``evidence.missing``: what a task returns must fit, or its completion fails forever."""
    evidence = result.evidence.model_copy(
        update={
            "commands": [],
            "artifacts": [],
            "approvals": [],
            "writes": [],
            "delegations": [],
            "missing": [
                *(cut(m, KEPT_TEXT_CHARS) for m in result.evidence.missing[:50]),
                f"the result was {size:,} bytes, more than the {MAX_PAYLOAD_BYTES:,}-byte limit: its "
                "command, approval, write and delegation records are left out (see the task's history "
                "and events)",
            ],
        }
    )
    return result.model_copy(
        update={
            "evidence": evidence,
            "evidence_complete": False,
            "final_output": cut(result.final_output, 100_000) if result.final_output else None,
        }
    )


def cut(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters, saying how much was cut."""
    if len(text) <= chars:
        return text
    return f"{text[:chars]}... [{len(text) - chars:,} more characters cut]"


def cut_values(data: dict[str, Any], chars: int = EVENT_TEXT_CHARS) -> dict[str, Any]:
    """``data`` with every string value (top level, and in lists) cut to ``chars`` characters."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, str) and len(value) > chars:
            value = cut(value, chars)
        elif isinstance(value, list) and any(isinstance(v, str) and len(v) > chars for v in value):
            value = [cut(v, chars) if isinstance(v, str) else v for v in value]
        out[key] = value
    return out


__all__ = [
    "BOUNDED_PATCH",
    "MAX_PAYLOAD_BYTES",
    "PayloadTooLarge",
    "check",
    "check_spec",
    "cut",
    "cut_values",
    "size_of",
    "slim_result",
]
