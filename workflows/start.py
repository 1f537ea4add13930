"""Starting a task: its place under the tenant's cap (``tenants.admit``), its inputs stored
(``artifacts.ingest``), and on a thread the conversation it continues (``threads.resume``). Workflow
code: deterministic, no I/O of its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.artifacts import ArtifactActivities
    from agent_worker.activities.tenants import TenantActivities
    from agent_worker.activities.threads import ThreadActivities
    from agent_worker.schemas.artifacts import ArtifactRef, IngestInput
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import FollowUp, TaskPhase
    from agent_worker.schemas.tenants import AdmitInput
    from agent_worker.schemas.threads import ResumeThreadInput
    from agent_worker.telemetry import metrics

from agent_worker.workflows import options
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.patches import LEAN_EVIDENCE_PATCH, TENANT_ADMISSION_PATCH, patched
from agent_worker.workflows.threads import first_message


class TaskStart:
    """Starts one task. A start that is refused ends the task through the workflow's own ``end``."""

    def __init__(self, task: TaskContext, *, end: Callable[[TaskPhase, str | None], Awaitable[None]]) -> None:
        self.task = task
        self.end = end
        # Shorthands for the task's fields.
        self.task_id, self.spec, self.state, self.emit = task.task_id, task.spec, task.state, task.emit

    async def admit(self) -> bool:
        """Take a place under the tenant's cap of running tasks; a refused start ends the task
        ``rejected``, explained."""
        assert self.spec is not None
        if not patched(TENANT_ADMISSION_PATCH):
            return True
        answer = await workflow.execute_local_activity_method(
            TenantActivities.admit,
            AdmitInput(task_id=self.task_id, tenant=self.spec.tenant, run_chain=self.state.run_chain),
            **options.local_config(options.ADMISSION, summary=f"admit to tenant {self.spec.tenant}"),
        )
        if answer.admitted:
            # A tenant without a cap keeps no place to release (``tenants.release`` would find none):
            # since patch ``lean-evidence`` the task's end does not ask.
            self.state.admitted = answer.cap is not None or not patched(LEAN_EVIDENCE_PATCH)
            self.state.colocated = list(answer.colocated)
            return True
        self.emit(EventType.TASK_REFUSED, tenant=self.spec.tenant, running=answer.running, cap=answer.cap)
        metrics.workflow_counter("agent_worker_tasks_refused", tenant=self.spec.tenant)
        await self.end(TaskPhase.REJECTED, f"refused at start: {answer.reason}")
        return False

    async def ingest(self, lean: bool) -> list[ArtifactRef]:
        """Store the task's inputs (``artifacts.ingest``): the input manifest. Since the minimum of
        round trips (``lean``), in a local activity of the first workflow task, and not at all without
        inputs."""
        assert self.spec is not None
        ingest = IngestInput(task_id=self.task_id, files=self.spec.inputs)
        summary = f"store the task's {len(self.spec.inputs)} inputs"
        if not lean:
            found = await workflow.execute_activity_method(
                ArtifactActivities.ingest, ingest, **options.config(options.INGEST, summary=summary)
            )
        elif not self.spec.inputs:
            return []
        else:
            found = await workflow.execute_local_activity_method(
                ArtifactActivities.ingest,
                ingest,
                **options.local_config(options.INGEST_LOCAL, summary=summary),
            )
        return found.inputs

    async def resume_thread(self) -> bool:
        """Start from the conversation of the thread's latest finished task (``threads.resume``), the
        prompt as its next user message; a new thread starts fresh. While another task of the thread
        runs, the task ends ``rejected``, explained (returns False)."""
        assert self.spec is not None and self.spec.thread is not None
        thread = self.spec.thread
        found = await workflow.execute_activity_method(
            ThreadActivities.resume,
            ResumeThreadInput(task_id=self.task_id, run_id=workflow.info().run_id, thread=thread),
            **options.config(options.THREADS, summary=f"find thread {thread}'s latest finished task"),
        )
        if found.refused is not None:
            await self.end(TaskPhase.REJECTED, f"refused at start: {found.refused}")
            return False
        if found.conversation_ref is None:
            self.emit(EventType.THREAD_STARTED, thread=thread)
            return True
        self.state.conversation_ref = found.conversation_ref
        # Ahead of any input that came while the thread was looked up.
        self.state.follow_ups.insert(0, FollowUp(text=first_message(self.spec.prompt, self.state.inputs)))
        self.emit(
            EventType.THREAD_CONTINUED,
            thread=thread,
            from_task=found.from_task,
            from_run=found.from_run,
            closed_calls=found.closed_calls,
        )
        return True
