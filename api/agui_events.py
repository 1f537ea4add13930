"""A task's live stream as AG-UI events (the ``ag-ui-protocol`` package's types), for ``api.agui``.

``Translator`` turns stream entries (``schemas.streams``), in offset order, into AG-UI events:

- ``token``: ``TEXT_MESSAGE_START`` (once per model call's text; the message id is ``msg-<offset>``
  of its first token) then ``TEXT_MESSAGE_CONTENT`` with the text;
- ``tool_call``: the open message ends; ``TOOL_CALL_START``, ``TOOL_CALL_ARGS`` (the call's JSON
  arguments, when the entry holds them), ``TOOL_CALL_END``;
- ``tool_result``: ``TOOL_CALL_RESULT`` (a read tool's output, or a sandbox command's, cut to a
  preview);
- ``step``: ``turn.started`` / ``turn.finished`` (or ``turn.failed``) open and close a step named
  ``turn <n>``; a new model call ends the open message;
- ``superseded``: the open message ends, and a ``CUSTOM`` event ``superseded`` names the message
  and tool call ids it voids (a retried turn's partial answer), for the client to drop;
- ``event``: a ``CUSTOM`` event ``agent_worker.event`` carrying the lifecycle event (once per
  ``event_id``).

The translation is a pure function of the entries: a run that resumes after offset ``n`` feeds the
entries up to ``n`` silently (``feed`` without yielding), then reopens what was open there
(``reopen``: the turn's step, the message being written, with its id) and goes on. The last event
made from an entry carries ``metadata.cursor`` = its offset (and the SSE ``id:``): the cursor a
client resumes after. Events made from one entry share it, so a cut between them resumes before the
entry and makes them all again, never half of them.
"""

from __future__ import annotations

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from agent_worker.schemas.streams import StreamEntry

# The metadata key of an event's cursor (the stream offset it completes).
CURSOR = "cursor"
# CUSTOM events' names.
SUPERSEDED = "superseded"
LIFECYCLE = "agent_worker.event"
# Lifecycle event ids remembered against repeats (the live-event tap may repeat a few).
_REMEMBERED_EVENTS = 10_000

CallKey = tuple[int, int, int]  # (turn, attempt, model call)


class Translator:
    """Stream entries -> AG-UI events (see the module docstring); one per AG-UI run."""

    def __init__(self) -> None:
        self.message: str | None = None
        self.message_key: CallKey | None = None
        self.steps: list[str] = []
        self.messages: dict[CallKey, list[str]] = {}
        self.tool_calls: dict[CallKey, list[str]] = {}
        self.events_seen: dict[str, None] = {}

    def feed(self, entry: StreamEntry) -> list[BaseEvent]:
        """The events ``entry`` makes; the last carries its offset as the cursor."""
        events = self._translate(entry)
        if events:
            events[-1].metadata = {**(events[-1].metadata or {}), CURSOR: entry.offset}
        return events

    def reopen(self) -> list[BaseEvent]:
        """What a resumed run opens again first: the open steps, then the message being written."""
        events: list[BaseEvent] = [StepStartedEvent(step_name=name) for name in self.steps]
        if self.message is not None:
            events.append(TextMessageStartEvent(message_id=self.message, role="assistant"))
        return events

    def close(self) -> list[BaseEvent]:
        """What a run that ends here closes: the message being written, then the open steps (an
        AG-UI run must not finish with either open; a resumed run reopens them)."""
        events: list[BaseEvent] = []
        if self.message is not None:
            events.append(TextMessageEndEvent(message_id=self.message))
        events += [StepFinishedEvent(step_name=name) for name in reversed(self.steps)]
        return events

    def _translate(self, entry: StreamEntry) -> list[BaseEvent]:
        key: CallKey = (entry.turn, entry.attempt, entry.call)
        data = entry.data
        if entry.kind == "token":
            return self._token(entry, key)
        if entry.kind == "tool_call":
            return self._tool_call(entry, key)
        if entry.kind == "tool_result":
            call_id = str(data.get("call_id") or "")
            if not call_id:
                return []
            output = str(data.get("output", ""))
            return [
                ToolCallResultEvent(
                    message_id=f"result-{entry.offset}", tool_call_id=call_id, content=output, role="tool"
                )
            ]
        if entry.kind == "step":
            return self._step(entry)
        if entry.kind == "superseded":
            return self._end_message() + [self._superseded(entry)]
        if entry.kind == "event":
            event_id = str(data.get("event_id", ""))
            if event_id in self.events_seen:
                return []
            self.events_seen[event_id] = None
            if len(self.events_seen) > _REMEMBERED_EVENTS:
                del self.events_seen[next(iter(self.events_seen))]
            return [CustomEvent(name=LIFECYCLE, value=data)]
        return []

    def _token(self, entry: StreamEntry, key: CallKey) -> list[BaseEvent]:
        text = str(entry.data.get("text", ""))
        if not text:
            return []
        events: list[BaseEvent] = []
        if self.message is not None and self.message_key != key:
            events += self._end_message()
        if self.message is None:
            self.message, self.message_key = f"msg-{entry.offset}", key
            self.messages.setdefault(key, []).append(self.message)
            events.append(TextMessageStartEvent(message_id=self.message, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self.message, delta=text))
        return events

    def _tool_call(self, entry: StreamEntry, key: CallKey) -> list[BaseEvent]:
        parent = self.message
        events = self._end_message()
        call_id = str(entry.data.get("call_id") or f"call-{entry.offset}")
        self.tool_calls.setdefault(key, []).append(call_id)
        events.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=str(entry.data.get("name", "")),
                parent_message_id=parent,
            )
        )
        arguments = entry.data.get("arguments")
        if isinstance(arguments, str) and arguments:
            events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=arguments))
        events.append(ToolCallEndEvent(tool_call_id=call_id))
        return events

    def _step(self, entry: StreamEntry) -> list[BaseEvent]:
        step = entry.data.get("step")
        name = f"turn {entry.turn}"
        events = self._end_message()
        if step == "turn.started" and name not in self.steps:
            self.steps.append(name)
            events.append(StepStartedEvent(step_name=name))
        elif step in ("turn.finished", "turn.failed") and name in self.steps:
            self.steps.remove(name)
            events.append(StepFinishedEvent(step_name=name))
        return events

    def _superseded(self, entry: StreamEntry) -> BaseEvent:
        call = entry.data.get("call")
        if call is None:  # a retried turn: every earlier attempt of it

            def void(key: CallKey) -> bool:
                return key[0] == entry.turn and key[1] < entry.attempt
        else:  # a model that failed mid-answer: that call of this attempt

            def void(key: CallKey) -> bool:
                return key == (entry.turn, entry.attempt, int(call))

        value = {
            "messageIds": [m for k, ids in self.messages.items() if void(k) for m in ids],
            "toolCallIds": [t for k, ids in self.tool_calls.items() if void(k) for t in ids],
            "reason": entry.data.get("reason", ""),
        }
        return CustomEvent(name=SUPERSEDED, value=value)

    def _end_message(self) -> list[BaseEvent]:
        if self.message is None:
            return []
        ended = TextMessageEndEvent(message_id=self.message)
        self.message = self.message_key = None
        return [ended]


def sse(event: BaseEvent) -> bytes:
    """One SSE frame of an AG-UI event (``id:`` its cursor, when it carries one)."""
    body = event.model_dump_json(by_alias=True)
    cursor = (event.metadata or {}).get(CURSOR)
    head = f"id: {cursor}\n" if cursor is not None else ""
    return f"{head}data: {body}\n\n".encode()


__all__ = ["CURSOR", "LIFECYCLE", "SUPERSEDED", "Translator", "sse"]
