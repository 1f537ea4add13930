"""Threads: a task naming a thread (``TaskSpec.thread``) continues a finished task's conversation.

At its start (``AgentTask.resume_thread``, guarded by ``THREADS_PATCH``) the task runs
``threads.resume`` (``activities/threads.py``), which finds the thread's latest finished task through
Temporal visibility (search attribute ``AgentThread``) and answers the digest of the conversation it
ended with (``TaskResult.conversation_ref``). The task's first turn starts from that conversation,
the task's prompt as the next user message. Only the digest crosses history; the conversation stays
in the artifact store.

- A thread with no finished task: the task starts fresh (event ``thread.started``).
- A thread with a task still running: the new task ends ``rejected`` at start, the reason naming the
  running task (send that one follow-up input instead, ``agent-worker say``, or start once it has
  finished). Two tasks continuing one conversation at once would fork it.
- Which task is "latest finished": the thread's run that closed last among those that returned a
  ``TaskResult`` with a conversation (completed, handed off, rejected after a turn, ...). Failed,
  terminated and cancelled runs have no result and are passed over.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # payload models and helpers: one copy for all runs
    from agent_worker.schemas.artifacts import ArtifactRef


def first_message(prompt: str, inputs: list[ArtifactRef]) -> str:
    """The task's first user message: its prompt, and its input files when it has any (as a turn
    that starts from the prompt alone writes it)."""
    if not inputs:
        return prompt
    listing = "\n".join(f"- {ref.name} ({ref.size} bytes, {ref.digest})" for ref in inputs)
    return f"{prompt}\n\nInput files (in the sandbox work dir):\n{listing}"


__all__ = ["first_message"]
