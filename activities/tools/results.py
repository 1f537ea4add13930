"""What a call of an effect tool returns to the workflow: the output (its head when long), and the
whole output kept in the artifact store under its digest (evidence, and the next turn reads it)."""

from __future__ import annotations

from activities.artifacts import ArtifactStore
from schemas.tools import ToolCallResult

# Characters of a tool's output that travel back to the workflow (and stay in its history).
OUTPUT_PREVIEW_CHARS = 16_000


def tool_result(
    store: ArtifactStore, text: str, *, is_error: bool = False, replayed: bool = False
) -> ToolCallResult:
    """Keep ``text`` whole in ``store`` and return what the workflow carries (blocking: call it in a
    thread from async code)."""
    digest = store.put(text.encode("utf-8"))
    if len(text) <= OUTPUT_PREVIEW_CHARS:
        return ToolCallResult(output=text, output_digest=digest, is_error=is_error, replayed=replayed)
    note = f"\n[the output is {len(text):,} characters; the whole output is the artifact {digest}]"
    return ToolCallResult(
        output=text[:OUTPUT_PREVIEW_CHARS] + note,
        output_ref=digest,
        output_digest=digest,
        is_error=is_error,
        replayed=replayed,
    )
