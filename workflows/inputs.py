"""What clients send a task, decoded and checked here rather than by the SDK's converter: a payload
it cannot decode is refused like any other bad input, and follow-up input is capped at arrival.
Workflow code: deterministic, no I/O of its own."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.tasks import FollowUp
    from agent_worker.schemas.validation import InvalidPayload

from agent_worker.workflows.patches import BOUNDED_PATCH, patched

# Follow-up input waiting for the next turn: more is refused at arrival, with the reason.
MAX_PENDING_FOLLOW_UPS = 100
MAX_PENDING_FOLLOW_UP_BYTES = 400_000


UNDECODABLE = "payload is not JSON this worker can decode (nested too deeply, or not JSON at all)"


def decode(raw: RawValue) -> Any:
    """The JSON value a client sent. Decoded here, not by the SDK, so a payload the converter cannot
    decode (nested too deeply, not JSON) is refused like any other bad input instead of failing
    workflow tasks over and over (a start) or being dropped unrecorded (a signal).

    Raises:
        InvalidPayload: the payload is not JSON this worker can decode.
    """
    try:
        return workflow.payload_converter().from_payload(raw.payload)
    except Exception:
        raise InvalidPayload(UNDECODABLE) from None


def follow_up_refused(pending: list[FollowUp], follow_up: FollowUp) -> str | None:
    """Why ``follow_up`` cannot wait for the next turn behind the ``pending`` ones, or None. What
    waits goes into the next turn's input, so it is capped at arrival rather than found too large
    later."""
    if not patched(BOUNDED_PATCH):
        return None
    if len(pending) >= MAX_PENDING_FOLLOW_UPS:
        return (
            f"refused: {len(pending)} follow-ups already wait for the next turn "
            f"(at most {MAX_PENDING_FOLLOW_UPS}); send it after the agent's next turn"
        )
    waiting = sum(len(f.text.encode()) for f in pending)
    size = len(follow_up.text.encode())
    if waiting + size > MAX_PENDING_FOLLOW_UP_BYTES:
        return (
            f"refused: {size:,} bytes of input would make {waiting + size:,} bytes waiting for the "
            f"next turn, more than the {MAX_PENDING_FOLLOW_UP_BYTES:,} a task holds; send it after "
            "the agent's next turn"
        )
    return None
