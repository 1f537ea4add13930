"""Live stream entries: a task's progress as it happens, out of band (never in workflow history).

A task's stream holds entries in ``offset`` order (1, 2, 3, ... per task and run chain). A reader
resumes after the last offset it saw and gets every later entry once. Entries are best effort and
bounded (the oldest are trimmed past ``stream_retention``); the event sink stays the audit record.

Kinds (``StreamKind``):

- ``token``: text the model wrote (``data.text``), in order; a call answered from the journal (a
  retried turn) or by a model that does not stream is one ``token`` entry with its whole text;
- ``tool_call``: the model made a tool call (``data.name``, ``data.call_id``, and ``data.arguments``,
  its JSON arguments as the model wrote them, left out past 8,000 characters: then
  ``data.arguments_chars`` says how long they were);
- ``tool_result``: a read tool that ran inside the turn finished (``data.name``, ``data.output``
  cut to a preview);
- ``step``: a boundary: ``data.step`` is ``turn.started``, ``turn.finished`` (with ``status``),
  ``call.started`` (a model call, ``data.model``);
- ``superseded``: the entries before it that it names are void: with ``data.call`` unset, every
  entry of its turn from attempts before its ``attempt`` (a retried turn); with ``data.call`` set,
  the entries of that model call in its own attempt (a model that failed mid-answer, whose
  fallback answers next). Readers drop them (``assemble_text`` does), so two answers never read
  as one;
- ``event``: a lifecycle event as the workflow emitted it (``data`` is the event, redacted as the
  sink's; ``activities.stores.live_events``); a repeat of an ``event_id`` is dropped by readers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field

StreamKind = Literal["token", "tool_call", "tool_result", "step", "superseded", "event"]


class StreamEntry(BaseModel):
    """One entry of a task's live stream (plain JSON; every field has a default)."""

    task_id: str = ""
    run_chain: str | None = None
    turn: int = Field(default=0, ge=0, description="The agent turn (0: not a turn's entry).")
    attempt: int = Field(default=1, ge=1, description="The turn activity's attempt that wrote it.")
    call: int = Field(default=0, ge=0, description="The model call within the turn (0-based).")
    offset: int = Field(default=0, ge=0, description="Its place in the task's stream (from 1).")
    kind: StreamKind = "step"
    data: dict[str, Any] = Field(default_factory=dict)
    at: float = Field(default=0.0, description="When it was written (Unix seconds).")
    writer: str = Field(default="", description="The worker process that wrote it (host:pid).")


def voided(entries: Iterable[StreamEntry]) -> set[int]:
    """The offsets of the entries that a ``superseded`` entry voids (a retried turn voids its
    earlier attempts' entries wherever they are, even those a stale attempt wrote after it)."""
    entries = list(entries)
    retried: dict[int, int] = {}
    for entry in entries:
        if entry.kind == "superseded" and entry.data.get("call") is None:
            retried[entry.turn] = max(retried.get(entry.turn, 0), entry.attempt)
    void = {e.offset for e in entries if e.kind != "superseded" and e.attempt < retried.get(e.turn, 0)}
    seen: list[StreamEntry] = []
    for entry in entries:
        call = entry.data.get("call") if entry.kind == "superseded" else None
        if call is not None:
            void.update(
                e.offset
                for e in seen
                if e.kind != "superseded" and (e.turn, e.attempt, e.call) == (entry.turn, entry.attempt, call)
            )
        seen.append(entry)
    return void


def assemble_text(entries: Iterable[StreamEntry], turn: int | None = None) -> str:
    """The text of the last model call that wrote any (of ``turn``, or of the last turn that did),
    from its ``token`` entries that nothing superseded: what a reader shows as the answer."""
    entries = list(entries)
    void = voided(entries)
    live = [e for e in entries if e.kind == "token" and e.offset not in void]
    if turn is not None:
        live = [e for e in live if e.turn == turn]
    if not live:
        return ""
    last = live[-1]
    return "".join(
        str(e.data.get("text", ""))
        for e in live
        if (e.turn, e.attempt, e.call) == (last.turn, last.attempt, last.call)
    )


__all__ = ["StreamEntry", "StreamKind", "assemble_text", "voided"]
