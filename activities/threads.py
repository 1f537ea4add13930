"""The ``threads.resume`` activity: where a task on a thread starts from.

A task naming a thread (``TaskSpec.thread``, search attribute ``AgentThread``) continues the
conversation of the thread's latest finished task. This activity finds that task through Temporal
visibility, reads its result (``TaskResult.conversation_ref``, a digest) and answers that digest:
the conversation itself stays in the artifact store, so nothing conversation-sized crosses history.

Which task is "latest finished": among the thread's closed runs that completed (returned a
``TaskResult``, whatever its phase) with a conversation, the one that closed last. Runs that failed,
were terminated or cancelled, or continued as new are passed over. Visibility lags a little behind
the server, so each run it still lists as running is described (authoritative) before it counts as
running. While another task of the thread runs, the new task is refused, with the reason: two tasks
continuing one conversation at once would fork it. A call the earlier task left without an answer
(it ended while the call waited for approval) is answered "not run" in a new copy of the
conversation, so the model sees a well-formed conversation.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import activity_boundary
from agent_worker.schemas import visibility
from agent_worker.schemas.tasks import TaskResult
from agent_worker.schemas.threads import ResumeThreadInput, ResumeThreadResult
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus

# A thread's runs looked at, newest first; past this the oldest are not considered.
MAX_RUNS = 500
# Completed runs whose results are read looking for one with a conversation.
MAX_RESULTS_READ = 20
NOT_RUN = "not run: the task that proposed this call ended before it ran"


class ThreadActivities:
    """``threads.resume`` over a Temporal client and the artifact store."""

    def __init__(self, client: Client, store: ArtifactStore) -> None:
        self.client = client
        self.store = store

    @activity.defn(name="threads.resume")
    @activity_boundary
    async def resume(self, input: ResumeThreadInput) -> ResumeThreadResult:
        """The conversation the thread's latest finished task ended with, or a refusal while another
        task of the thread runs, or nothing (a new thread)."""
        # Only task workflows set the attribute (the thread id's pattern keeps the query well-formed).
        query = f"{visibility.THREAD.name} = '{input.thread}'"
        closed: list[tuple[datetime, str, str]] = []
        seen = 0
        async for execution in self.client.list_workflows(query, page_size=100):
            seen += 1
            if seen > MAX_RUNS:
                break
            if execution.run_id == input.run_id:
                continue
            status, close_time = execution.status, execution.close_time
            if status is WorkflowExecutionStatus.RUNNING:
                described = await self.client.get_workflow_handle(
                    execution.id, run_id=execution.run_id
                ).describe()
                status, close_time = described.status, described.close_time
                if status is WorkflowExecutionStatus.RUNNING:
                    return ResumeThreadResult(
                        refused=f"thread {input.thread!r} has a task still running ({execution.id}); "
                        "send it follow-up input (agent-worker say) or start this task once it has finished"
                    )
            if status is WorkflowExecutionStatus.COMPLETED:
                closed.append(
                    (close_time or datetime.min.replace(tzinfo=UTC), execution.id, execution.run_id)
                )
        closed.sort(reverse=True)
        for _, task_id, run_id in closed[:MAX_RESULTS_READ]:
            result = await self.client.get_workflow_handle(
                task_id, run_id=run_id, result_type=TaskResult
            ).result(follow_runs=False)
            if result.conversation_ref is None:
                continue
            ref, closed_calls = await asyncio.to_thread(self._well_formed, result.conversation_ref)
            return ResumeThreadResult(
                conversation_ref=ref, from_task=task_id, from_run=run_id, closed_calls=closed_calls
            )
        return ResumeThreadResult()

    def _well_formed(self, ref: str) -> tuple[str, int]:
        """``ref``, or a copy with an output for each call that has none, and how many it added."""
        items: list[dict[str, Any]] = self.store.get_json(ref)
        answered = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
        open_calls = [
            i.get("call_id")
            for i in items
            if i.get("type") == "function_call" and i.get("call_id") not in answered
        ]
        if not open_calls:
            return ref, 0
        closing = [{"type": "function_call_output", "call_id": c, "output": NOT_RUN} for c in open_calls]
        return self.store.put_json([*items, *closing]), len(open_calls)


__all__ = ["ThreadActivities"]
