"""What a tool's output becomes on its way to the model: the output (its head when long), and the
whole output kept in the artifact store under its digest (evidence).

One mechanism for every tool output that is not a sandbox command's (those are capped by the task's
``model_output_limit_bytes``): an effect tool's call (``tool.call``, ``mcp.call``), and a read
tool's call inside the turn, an MCP server's (``activities.tools.mcp``) or the agent's own
``@function_tool``'s (``activities.agent.read_tools``). An output past ``OUTPUT_PREVIEW_CHARS``
reaches the model as its first ``OUTPUT_PREVIEW_CHARS`` characters and a note naming the whole's
size and digest.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.schemas.tools import ToolCallResult

# Characters of a tool's output that reach the model (and travel back to the workflow).
OUTPUT_PREVIEW_CHARS = 16_000


@dataclass(frozen=True)
class BoundedOutput:
    """A tool's output as the model sees it.

    Attributes:
        text: The output whole, or its head and a note naming the whole's size and digest.
        digest: The digest of the whole output in the artifact store.
        view_ref: The digest of ``text`` in the artifact store when it is a head (None: whole).
    """

    text: str
    digest: str
    view_ref: str | None = None


def bounded_output(store: ArtifactStore, text: str) -> BoundedOutput:
    """Keep ``text`` whole in ``store`` and return what the model may see of it (blocking: call it in
    a thread from async code)."""
    digest = store.put(text.encode("utf-8"))
    if len(text) <= OUTPUT_PREVIEW_CHARS:
        return BoundedOutput(text, digest)
    note = (
        f"\n[the output is {len(text):,} characters; the first {OUTPUT_PREVIEW_CHARS:,} are here; "
        f"the whole output is the artifact {digest}]"
    )
    view = text[:OUTPUT_PREVIEW_CHARS] + note
    return BoundedOutput(view, digest, store.put(view.encode("utf-8")))


async def bounded_read(
    store: ArtifactStore, text: str, call_id: str | None = None, whole_outputs: dict[str, str] | None = None
) -> str:
    """What the model reads of a read tool's output ``text`` inside a turn: the text itself up to
    ``OUTPUT_PREVIEW_CHARS``; past that, the head and note of ``bounded_output`` (the whole kept in
    ``store``), its digest noted in ``whole_outputs`` under ``call_id`` for the call's record."""
    if len(text) <= OUTPUT_PREVIEW_CHARS:
        return text
    bounded = await asyncio.to_thread(bounded_output, store, text)
    if whole_outputs is not None and call_id:
        whole_outputs[call_id] = bounded.digest
    return bounded.text


def tool_result(
    store: ArtifactStore, text: str, *, is_error: bool = False, replayed: bool = False
) -> ToolCallResult:
    """What the workflow carries of an effect tool's call (blocking: call it in a thread from async
    code). A long output's ``output_ref`` is the stored head and note, which the next turn gives the
    model (``activities.agent.turn``); ``output_digest`` is the whole's."""
    bounded = bounded_output(store, text)
    return ToolCallResult(
        output=bounded.text,
        output_ref=bounded.view_ref,
        output_digest=bounded.digest,
        is_error=is_error,
        replayed=replayed,
    )
