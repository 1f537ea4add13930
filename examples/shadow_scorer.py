"""Scorers for ``agent-worker shadow --scorer``: a callable, given keyword arguments, returning a
number (or a ``(number, detail)`` pair). ``docs/shadow.md`` shows how to write your own."""

from __future__ import annotations

import difflib


def same_answer(
    *, task_id: str, prompt: str, recorded: str | None, candidate: str | None
) -> tuple[float, str]:
    """1.0 for the recorded answer word for word; otherwise how much of it the candidate's answer
    keeps (difflib's ratio, 0 to 1)."""
    if candidate == recorded:
        return 1.0, "the recorded answer"
    ratio = difflib.SequenceMatcher(None, recorded or "", candidate or "").ratio()
    return round(ratio, 4), f"{ratio:.0%} alike"
