"""Records of the read-only tool calls a turn makes.

Read-only tools (plain ``@function_tool``s, no effect declaration) run inside the turn, so the
workflow never sees them as actions. ``ReadToolRecorder`` is the run's ``RunHooks``: for each such
call it stores the canonical JSON of the arguments and the output text in the artifact store and
keeps a ``ToolCallRecord`` (name, call id, both digests, duration, whether the tool raised) that the
turn returns (an output the model read bounded is already stored whole: the record names that), and
the workflow turns into a ``tool.called`` event and evidence.

On a retried turn the model calls come from the journal, so the same calls run again with the same
arguments: a deterministic tool gives the same digests; the duration is the one measured then.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pydantic
from agent_worker.activities.agent.tools import effect_of
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.schemas.digests import canonical_json
from agent_worker.schemas.turns import MAX_TOOL_CALL_RECORDS, ToolCallRecord
from agents import Agent, FunctionTool, RunContextWrapper, RunHooks, Tool
from agents.tool import default_tool_error_function

# What the SDK's default failure function tells the model when a tool raised (a fixed text): the
# hooks see only the output, so a call is recorded as an error when its output is this text. A tool
# with its own ``failure_error_function`` is recorded with the text that function returned and
# ``error`` False: its output is indistinguishable from an answer here.
_FAILED_OUTPUT = default_tool_error_function(None, RuntimeError())  # type: ignore[arg-type]


def arguments_bytes(raw: str | None) -> bytes:
    """The canonical JSON of a call's arguments (as sent, when they are not JSON)."""
    try:
        return canonical_json(json.loads(raw or "{}"))
    except (ValueError, TypeError):
        return (raw or "").encode("utf-8")


def output_bytes(output: object) -> bytes:
    """The tool's output as text: a string as is, anything else as canonical JSON where it can be."""
    if isinstance(output, str):
        return output.encode("utf-8")
    if isinstance(output, pydantic.BaseModel):
        return canonical_json(output.model_dump(mode="json"))
    try:
        return canonical_json(output)
    except (ValueError, TypeError):
        return str(output).encode("utf-8")


class ReadToolRecorder(RunHooks[Any]):
    """``RunHooks`` that record every read-only function tool call of one turn.

    Calls of one model response run concurrently, so they may end in any order; they start in the
    response's order, and that order (not the order they end in) decides which calls a record is
    kept for and how the records are listed, so a retried turn lists the same records.

    Attributes:
        dropped: Calls past ``MAX_TOOL_CALL_RECORDS``, counted (their arguments and output are not
            stored).
    """

    def __init__(self, store: ArtifactStore, turn: int, whole_outputs: dict[str, str] | None = None) -> None:
        """``whole_outputs``: the digest of a call's whole output, by call id, when the model was
        given its head (``TurnServices.whole_outputs``): the record names the whole."""
        self.store = store
        self.turn = turn
        self.whole_outputs = {} if whole_outputs is None else whole_outputs
        self.dropped = 0
        self._calls = 0
        self._started: dict[str, tuple[int, float]] = {}
        self._records: list[tuple[int, ToolCallRecord]] = []

    @property
    def records(self) -> list[ToolCallRecord]:
        """The first ``MAX_TOOL_CALL_RECORDS`` calls, in the order they started."""
        return [record for _, record in sorted(self._records, key=lambda pair: pair[0])]

    @staticmethod
    def _read_only(tool: Tool) -> bool:
        return isinstance(tool, FunctionTool) and effect_of(tool) is None

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if call_id and self._read_only(tool):
            self._started[call_id] = (self._calls, time.monotonic())
            self._calls += 1

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if not call_id or not self._read_only(tool):
            return
        seq, started = self._started.pop(call_id, (self._calls, time.monotonic()))
        duration_ms = round((time.monotonic() - started) * 1000)
        if seq >= MAX_TOOL_CALL_RECORDS:
            self.dropped += 1
            return
        arguments = arguments_bytes(getattr(context, "tool_arguments", None))
        whole = self.whole_outputs.get(call_id)
        output = None if whole is not None else output_bytes(result)
        arguments_ref, stored = await asyncio.to_thread(self._store, arguments, output)
        output_ref = whole or stored
        self._records.append(
            (
                seq,
                ToolCallRecord(
                    name=tool.name,
                    call_id=call_id,
                    arguments_digest=arguments_ref,
                    output_digest=output_ref,
                    duration_ms=duration_ms,
                    error=result == _FAILED_OUTPUT,
                    turn=self.turn,
                ),
            )
        )

    def _store(self, arguments: bytes, output: bytes | None) -> tuple[str, str]:
        return self.store.put(arguments), "" if output is None else self.store.put(output)


__all__ = ["ReadToolRecorder", "arguments_bytes", "output_bytes"]
