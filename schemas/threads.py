"""Threads: a task naming a thread continues the conversation of the thread's latest finished task."""

from __future__ import annotations

from agent_worker.schemas.digests import DIGEST_PATTERN
from pydantic import BaseModel, Field


class ResumeThreadInput(BaseModel):
    """Input of ``threads.resume``."""

    task_id: str
    run_id: str = Field(description="The asking run: it is on the thread too, and never its own source.")
    thread: str


class ResumeThreadResult(BaseModel):
    """Output of ``threads.resume``: where the task starts from, or why it cannot start."""

    conversation_ref: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="The conversation to continue (None: the thread has no finished task; start fresh).",
    )
    from_task: str | None = Field(default=None, description="The finished task it continues.")
    from_run: str | None = None
    closed_calls: int = Field(
        default=0, description="Calls left without an answer in that conversation, answered 'not run'."
    )
    refused: str | None = Field(
        default=None, description="Why the task cannot start on the thread (another task is running)."
    )
