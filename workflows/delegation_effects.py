"""Running delegations from the workflow: a sub-task as a child ``AgentTask`` with its share of the
task's budgets, waited for, its outcome reported to the agent and its usage rolled up. Workflow code:
deterministic, no I/O of its own."""

from __future__ import annotations

import json

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.actions import Delegation, ProposedAction
    from agent_worker.schemas.artifacts import InputFile
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import DelegationRecord, TaskInput, TaskPhase, TaskResult, TaskSpec

from agent_worker.workflows import bounds
from agent_worker.workflows.budget_tree import BudgetKeeper, child_usage
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.failures import failure_details, failure_message
from agent_worker.workflows.patches import BOUNDED_PATCH, patched


class DelegationEffects:
    """Runs one task's delegations as child tasks and records them as evidence."""

    def __init__(self, task: TaskContext, *, budget: BudgetKeeper) -> None:
        self.task = task
        self.budget = budget

    async def delegate(self, action: ProposedAction, delegation: Delegation) -> tuple[str, bool]:
        """Run the sub-task as a child task and wait for it. A child that fails is reported to the
        agent (the parent carries on); cancelling the parent cancels the child."""
        spec, state = self.task.valid_spec, self.task.state
        child_id = f"{self.task.task_id}/sub/{action.call_id}"
        by_name = {ref.name: ref for ref in state.inputs}
        unknown = [name for name in delegation.inputs if name not in by_name]
        if unknown:
            return json.dumps(
                {"task_id": child_id, "phase": "failed", "reason": f"no inputs named {unknown}"}
            ), False
        budgets = self.budget.reserve(action.call_id)  # its share of what the task has left
        if isinstance(budgets, str):
            return json.dumps({"task_id": child_id, "phase": "failed", "reason": budgets}), False
        child = TaskSpec(
            agent=delegation.agent,
            prompt=delegation.prompt,
            tenant=spec.tenant,
            inputs=[
                InputFile(name=name, digest=by_name[name].digest, media_type=by_name[name].media_type)
                for name in delegation.inputs
            ],
            policy=spec.policy,
            budgets=budgets,
            sandbox=spec.sandbox,
            labels={**spec.labels, "parent_task": self.task.task_id},
        )
        self.task.emit(
            EventType.DELEGATION_STARTED,
            call_id=action.call_id,
            child=child_id,
            agent=delegation.agent,
            **self.budget.reserved(action.call_id),
        )
        if patched(BOUNDED_PATCH):
            bounds.check(
                f"sub-task {child_id}'s input", TaskInput(spec=child, release=self.task.input_release)
            )
        try:
            result = await workflow.execute_child_workflow(
                "AgentTask",
                TaskInput(spec=child, release=self.task.input_release),
                id=child_id,
                task_queue=workflow.info().task_queue,
                result_type=TaskResult,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            )
            record = DelegationRecord(
                call_id=action.call_id,
                task_id=child_id,
                agent=delegation.agent,
                phase=result.phase,
                final_output=result.final_output,
                reason=result.reason,
            )
            self.budget.roll_up(action.call_id, result.usage)
        except ChildWorkflowError as err:
            if is_cancelled_exception(err) and workflow.cancellation_reason() is not None:
                raise  # the parent itself is being cancelled
            self.budget.roll_up(action.call_id, child_usage(None, failure_details(err)))
            record = DelegationRecord(
                call_id=action.call_id,
                task_id=child_id,
                agent=delegation.agent,
                phase=TaskPhase.CANCELLED if is_cancelled_exception(err) else TaskPhase.FAILED,
                reason=failure_message(err),
            )
        state.delegations.append(record)
        self.task.emit(
            EventType.DELEGATION_FINISHED, call_id=action.call_id, child=child_id, phase=record.phase.value
        )
        output = record.model_dump(
            mode="json", include={"task_id", "agent", "phase", "final_output", "reason"}
        )
        return json.dumps(output, sort_keys=True), record.phase is TaskPhase.COMPLETED
