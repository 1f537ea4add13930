"""The AG-UI endpoint (``POST /v1/agui``): a task's run as AG-UI events, for apps built on the AG-UI
protocol (``@ag-ui/client``, CopilotKit). See docs/ag-ui.md.

The request is AG-UI's ``RunAgentInput``; its ``threadId`` is the task id (the task is started with
``POST /v1/tasks``). The answer is a Server-Sent Events stream of one AG-UI run:

1. ``RUN_STARTED``; then a ``STATE_SNAPSHOT`` of the task: ``taskId``, ``phase``, ``turn``,
   ``reason``, ``finalOutput``, the approval requests the caller may decide (``pending``), and the
   ``cursor``; a new snapshot whenever one of them (but the cursor) changes.
2. The task's live stream after the cursor, translated (``api.agui_events``): the model's tokens as
   ``TEXT_MESSAGE_*``, its tool calls as ``TOOL_CALL_START/ARGS/END``, results as
   ``TOOL_CALL_RESULT``, turns as steps, lifecycle events as ``CUSTOM``.
3. The run ends in one of three ways. The task waits for an approval the caller may decide:
   ``RUN_FINISHED`` with an **interrupt** outcome, one interrupt per request (its id is
   ``<request id>@<version>``: an answer is bound to the exact version shown). The task closed:
   ``RUN_FINISHED`` (``result``: phase, final output, reason; outcome ``cancelled`` for a cancelled
   task), or ``RUN_ERROR`` for a task that failed or was handed off.

**Answering an interrupt.** The next run's ``resume`` entries answer the interrupts: ``status:
"resolved"`` with ``payload: {"decision": "approve" | "edit" | "reject", "reason"?,
"edited_args"?}``. Each goes through the API's decision path as the caller (the same checks as
``POST /v1/tasks/{id}/decisions``: 403 before anything reaches the task when the request does not
name them); a decision the task does not accept (stale, decided already: a resume sent twice) is
reported in the run as a ``CUSTOM`` event ``decision.ignored``, and the run goes on. ``status:
"cancelled"`` leaves the request pending.

**Resuming after a cut.** Every event made from a stream entry carries ``metadata.cursor`` (and
the SSE ``id:``); a run asked with ``Last-Event-ID: <cursor>`` or ``forwardedProps.cursor`` starts
after it: it reopens the step and the message that were open there and goes on, with no token lost
or repeated. Without one, the run starts from the task's beginning.

Every request passes ``api.guard`` like the API's other routes (who, the body's size and type, open
streams: an AG-UI run counts as one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
)
from ag_ui.core.version import PROTOCOL_VERSION
from agent_worker.activities.stores.streams import StreamBackend
from agent_worker.api.agui_events import Translator, sse
from agent_worker.api.agui_page import PAGE
from agent_worker.api.guard import AGUI_PATH
from agent_worker.api.streams import BATCH, BLOCK_MS, KEEPALIVE_SECONDS
from agent_worker.inbox.service import InboxError, InboxService, TaskView
from agent_worker.schemas.approvals import ApprovalRequest, DecisionKind
from agent_worker.schemas.streams import StreamEntry
from agent_worker.schemas.tasks import TaskPhase
from fastapi import Depends, FastAPI, Header, HTTPException
from fastapi.responses import HTMLResponse, StreamingResponse
from pydantic import BaseModel, Field, ValidationError

from agent_worker.client import AgentWorkerClient
from agent_worker.decisions import Decision

# How often a run asks the task for its state while the stream has new entries (when it has none,
# once per blocking read).
STATE_SECONDS = 0.5
INTERRUPT_REASON = "approval"
# Answers one run may carry (each is a round trip to the task).
MAX_ANSWERS = 50
# The inbox's status for a decision on a request that is no longer pending.
NOT_PENDING = 409
# The JSON Schema of an interrupt's answer (``resume[].payload``), for a client to build its form.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": [k.value for k in DecisionKind]},
        "reason": {"type": "string", "maxLength": 4000},
        "edited_args": {"type": "object", "description": "For an edit: the arguments to change."},
    },
    "required": ["decision"],
}
_ENDS_IN_ERROR = frozenset({TaskPhase.FAILED, TaskPhase.HANDED_OFF})
AGUI_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "One AG-UI run as Server-Sent Events: `data:` an AG-UI event as JSON; `id:` "
        "its cursor, on the events that carry one (`metadata.cursor`).",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


class InterruptAnswer(BaseModel):
    """An interrupt's answer (``resume[].payload``)."""

    decision: DecisionKind
    reason: str | None = Field(default=None, max_length=4000)
    edited_args: dict[str, Any] | None = None


def interrupt_id(request: ApprovalRequest) -> str:
    """An approval request's interrupt id: bound to its version."""
    return f"{request.request_id}@{request.version}"


def parse_interrupt_id(value: str) -> tuple[str, str]:
    """(request id, version) of an interrupt id; 400 when it is not one of ours."""
    request_id, _, version = value.rpartition("@")
    if not request_id or not version.startswith("sha256:"):
        raise HTTPException(400, f"interrupt {value!r} is not an approval request of this API")
    return request_id, version


def resume_cursor(last_event_id: str | None, run: RunAgentInput) -> int:
    """Where the run starts: after ``Last-Event-ID``, else ``forwardedProps.cursor``, else 0."""
    props = run.forwarded_props if isinstance(run.forwarded_props, dict) else {}
    for given in (last_event_id, props.get("cursor")):
        text = str(given) if given is not None else ""
        if text.isdigit():
            return int(text)
    return 0


async def answer_interrupts(
    service: InboxService, task_id: str, who: str, view: TaskView, run: RunAgentInput
) -> list[BaseEvent]:
    """Send the run's ``resume`` answers as ``who``'s decisions; events for those not accepted."""
    entries = run.resume or []
    if len(entries) > MAX_ANSWERS:
        raise HTTPException(422, f"a run answers at most {MAX_ANSWERS} interrupts ({len(entries)} given)")
    answers: list[tuple[str, str, str, InterruptAnswer]] = []
    for entry in entries:  # all checked before any is sent
        request_id, version = parse_interrupt_id(entry.interrupt_id)
        if entry.status != "resolved":
            continue
        try:
            answer = InterruptAnswer.model_validate(entry.payload or {})
        except ValidationError as err:
            raise HTTPException(422, f"resume {entry.interrupt_id!r}: {err.errors()[0]['msg']}") from None
        answers.append((entry.interrupt_id, request_id, version, answer))
    events: list[BaseEvent] = []
    for given_id, request_id, version, answer in answers:
        decision = Decision(
            request_id=request_id,
            kind=answer.decision.value,
            principal=who,
            version=version,
            reason=(answer.reason or "").strip() or None,
            edited_args=(answer.edited_args or {}) if answer.decision is DecisionKind.EDIT else None,
            edit_given="changes",
        )
        try:
            outcome = await service.submit(task_id, decision)
        except InboxError as err:
            if err.status != NOT_PENDING:
                raise HTTPException(err.status, str(err)) from None
            detail = str(err)  # decided already (an answer sent twice, as by a run sent again)
        else:
            if outcome.accepted:
                continue
            detail = outcome.detail
        value = {"interruptId": given_id, "detail": detail}
        events.append(CustomEvent(name="decision.ignored", value=value))
    return events


def snapshot(view: TaskView, cursor: int) -> dict[str, Any]:
    """The task's AG-UI state."""
    status = view.status
    result = view.result
    phase = status.phase if status else (result.phase if result else None)
    return {
        "taskId": view.task_id,
        "phase": phase.value if phase else None,
        "turn": status.turn if status else None,
        "reason": (status.reason if status else None) or (result.reason if result else view.problem),
        "finalOutput": (result.final_output if result else None) or (status.final_output if status else None),
        "pending": [
            {
                "interruptId": interrupt_id(r),
                "requestId": r.request_id,
                "version": r.version,
                "tool": r.action.tool,
                "toolCallId": r.action.call_id,
                "arguments": r.action.arguments,
                "approvers": r.approvers,
                "reason": r.reason,
                "deadline": r.deadline.isoformat(),
            }
            for r in view.decidable
        ],
        "cursor": cursor,
    }


def interrupts(view: TaskView) -> list[Interrupt]:
    """The approval requests ``view``'s principal may decide, as AG-UI interrupts."""
    return [
        Interrupt(
            id=interrupt_id(r),
            reason=INTERRUPT_REASON,
            message=f"{r.action.tool} needs your approval" + (f": {r.reason}" if r.reason else ""),
            tool_call_id=r.action.call_id,
            response_schema=ANSWER_SCHEMA,
            expires_at=r.deadline.isoformat(),
            metadata={
                "requestId": r.request_id,
                "version": r.version,
                "tool": r.action.tool,
                "arguments": r.action.arguments,
            },
        )
        for r in view.decidable
    ]


def finished(view: TaskView, thread_id: str, run_id: str) -> BaseEvent:
    """How a run of a closed task ends."""
    result = view.result
    if result is None or result.phase in _ENDS_IN_ERROR:
        phase = result.phase.value if result else (view.status.phase.value if view.status else "closed")
        reason = (result.reason if result else None) or view.problem or phase
        return RunErrorEvent(message=reason, code=phase)
    value = {"phase": result.phase.value, "finalOutput": result.final_output, "reason": result.reason}
    outcome = RunFinishedCancelledOutcome() if result.phase is TaskPhase.CANCELLED else None
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id, result=value, outcome=outcome)


async def follow_run(
    *,
    backend: StreamBackend,
    task_id: str,
    chain: str | None,
    run: RunAgentInput,
    after: int,
    view_of: Callable[[], Awaitable[TaskView]],
    before: list[BaseEvent],
) -> AsyncIterator[bytes]:
    """One AG-UI run of the task as SSE frames (see the module docstring)."""

    async def read(after_offset: int, block_ms: int) -> list[StreamEntry]:
        return await asyncio.to_thread(backend.read, task_id, chain, after_offset, BATCH, block_ms)

    yield sse(
        RunStartedEvent(
            thread_id=run.thread_id, run_id=run.run_id, protocol_version=PROTOCOL_VERSION, input=run
        )
    )
    for event in before:
        yield sse(event)
    translator = Translator()
    seen = 0
    while seen < after:  # rebuild what was open at the cursor; nothing is sent for it
        entries = [e for e in await read(seen, 0) if e.offset <= after]
        if not entries:
            break
        for entry in entries:
            translator.feed(entry)
        seen = entries[-1].offset
    seen = max(seen, after)
    for event in translator.reopen():
        yield sse(event)

    shown: dict[str, Any] | None = None
    asked_at = 0.0
    idle_since = time.monotonic()
    drained = False  # the last read found nothing new
    while True:
        if shown is None or drained or time.monotonic() - asked_at >= STATE_SECONDS:
            try:
                view = await view_of()
            except Exception as err:  # the task is gone, or Temporal does not answer: the run ends
                for event in translator.close():
                    yield sse(event)
                yield sse(RunErrorEvent(message=str(err) or type(err).__name__, code="unavailable"))
                return
            asked_at = time.monotonic()
            state = snapshot(view, seen)
            if shown is None or {**shown, "cursor": seen} != state:
                shown = state
                yield sse(StateSnapshotEvent(snapshot=state))
            if drained and not view.running and not await read(seen, 0):  # nothing written as it closed
                for event in translator.close():
                    yield sse(event)
                yield sse(finished(view, run.thread_id, run.run_id))
                return
            if drained and waits_for(view):
                for event in translator.close():
                    yield sse(event)
                outcome = RunFinishedInterruptOutcome(interrupts=interrupts(view))
                yield sse(RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id, outcome=outcome))
                return
        entries = await read(seen, BLOCK_MS)
        if entries and entries[0].offset > seen + 1:
            gap = {"missedFrom": seen + 1, "missedTo": entries[0].offset - 1}
            yield sse(CustomEvent(name="gap", value=gap))
        for entry in entries:
            seen = entry.offset
            for event in translator.feed(entry):
                yield sse(event)
        drained = not entries
        if entries:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > KEEPALIVE_SECONDS:
            idle_since = time.monotonic()
            yield b": keepalive\n\n"


def add_agui_routes(
    app: FastAPI,
    *,
    principal: Callable[..., str],
    visible: Callable[[str, str], Awaitable[TaskView]],
    service: InboxService,
    tasks: AgentWorkerClient,
    streams: StreamBackend | None,
) -> None:
    """``POST /v1/agui`` (and ``GET /agui``, a minimal page that follows a task with it) on ``app``.

    Args:
        app: The API.
        principal: The dependency naming the caller (``api.guard`` authenticated them).
        visible: The task as the caller may see it (404 when they may not).
        service: The inbox's service: views and decisions.
        tasks: The workflow's client.
        streams: The workers' stream backend; None: the endpoint answers 404.
    """

    @app.post(AGUI_PATH, response_class=StreamingResponse, responses=AGUI_RESPONSES)
    async def agui(
        run: RunAgentInput,
        who: str = Depends(principal),
        last_event_id: str | None = Header(default=None),
    ) -> StreamingResponse:
        """One AG-UI run of the task named by ``threadId`` (docs/ag-ui.md): its live stream as AG-UI
        events, its state as snapshots, until it closes or waits for the caller's approval (an
        interrupt, answered by the next run's ``resume``). ``Last-Event-ID`` (or
        ``forwardedProps.cursor``) starts after that cursor."""
        task_id = run.thread_id
        view = await visible(task_id, who)
        if streams is None:
            raise HTTPException(404, "this API has no live stream (stream_backend=none)")
        before = await answer_interrupts(service, task_id, who, view, run)
        description = await tasks.handle(task_id).describe()
        chain = description.raw_description.workflow_execution_info.first_run_id or None

        async def view_of() -> TaskView:
            return await service.task(task_id, who)

        frames = follow_run(
            backend=streams,
            task_id=task_id,
            chain=chain,
            run=run,
            after=resume_cursor(last_event_id, run),
            view_of=view_of,
            before=before,
        )
        return StreamingResponse(
            frames,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get("/agui", response_class=HTMLResponse, include_in_schema=False)
    async def agui_page() -> str:
        """A minimal page that follows a task over ``POST /v1/agui`` (no secret in it: the caller
        gives the token)."""
        return PAGE


def waits_for(view: TaskView) -> bool:
    """Whether the task waits for an approval the caller may decide."""
    return (
        view.running
        and view.status is not None
        and view.status.phase is TaskPhase.AWAITING_APPROVAL
        and bool(view.decidable)
    )


__all__ = [
    "ANSWER_SCHEMA",
    "add_agui_routes",
    "InterruptAnswer",
    "answer_interrupts",
    "follow_run",
    "interrupt_id",
    "interrupts",
    "parse_interrupt_id",
    "resume_cursor",
    "snapshot",
    "waits_for",
]
