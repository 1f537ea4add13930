"""Running decided actions from the workflow: refused, or run as approved or edited by the module that
owns their kind (``sandbox_effects``: sandbox commands; ``write_effects``: business writes;
``delegation_effects``: sub-tasks; ``tool_effects``: the agent's own effect tools), each its own
activity, each recorded as evidence. Workflow code: deterministic, no I/O of its own."""

from __future__ import annotations

from functools import partial
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.agent.turn import AgentActivities
    from agent_worker.schemas.actions import (
        ActionResult,
        ActionStatus,
        BudgetRaise,
        Delegation,
        FunctionCall,
        McpCall,
        ProposedAction,
        SandboxCommand,
        action_version,
    )
    from agent_worker.schemas.approvals import ApprovalDecision, DecisionKind
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import BatchItem, PolicyVerdict, TaskPhase
    from agent_worker.schemas.turns import PlanInput, PlanResult

from agent_worker.workflows import options
from agent_worker.workflows.approvals import ApprovalDesk
from agent_worker.workflows.budget_tree import BudgetKeeper
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.decisions import find_request
from agent_worker.workflows.delegation_effects import DelegationEffects
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.patches import CHECK_EDITS_PATCH, patched
from agent_worker.workflows.placement import Placement
from agent_worker.workflows.questions import settled
from agent_worker.workflows.sandbox_effects import SandboxEffects
from agent_worker.workflows.tool_effects import ToolEffects
from agent_worker.workflows.write_effects import WriteEffects, WriteRevoked

_CHECKED_BY_WRITE = "checked by business.write before it wrote"


class EffectRunner:
    """Runs one batch item's effect for a task and records the evidence. Decisions come from the
    task's ``approvals``; agent and sandbox activities run where its ``placement`` says."""

    def __init__(
        self, task: TaskContext, *, approvals: ApprovalDesk, placement: Placement, budget: BudgetKeeper
    ) -> None:
        self.task = task
        self.approvals = approvals
        self.placement = placement
        self.budget = budget
        self.tools = ToolEffects(task, placement=placement)
        self.sandbox = SandboxEffects(task, placement=placement)
        self.writes = WriteEffects(task)
        self.delegations = DelegationEffects(task, budget=budget)

    async def run(self, item: BatchItem) -> ActionResult | None:
        """The result of a decided action: refused, or run (as approved or as edited). None when an
        edit the tool refuses put the request up for a decision again."""
        action = item.action
        if item.verdict is PolicyVerdict.DENY:
            return _result(action, ActionStatus.DENIED, f"denied by policy: {item.policy_reason}")
        record = self.approvals.decision_for(item)
        if record is not None and record.decision is DecisionKind.REJECT:
            message = f"rejected by {record.principal}: {record.reason or 'no reason given'}"
            return _result(action, ActionStatus.REJECTED, message)
        answered = settled(action, record)  # a question's answer, a respond: nothing runs
        if answered is not None:
            return answered
        if isinstance(action.operation, BudgetRaise):
            return self.budget.extend(item, record)  # the task's own request, not a model's call
        operation, arguments, status = action.operation, action.arguments, ActionStatus.EXECUTED
        if record is not None and record.decision is DecisionKind.EDIT:
            assert record.edited_args is not None
            arguments = {**action.arguments, **record.edited_args}
            plan = await self.plan(action.tool, arguments, owner=action.agent)
            if plan.operation is None:
                problem = f"the approver's edited arguments are invalid: {plan.error}"
                if patched(CHECK_EDITS_PATCH):
                    self.approvals.edit_refused(item, record, problem)
                    return None
                return _result(action, ActionStatus.FAILED, problem)
            operation, status = plan.operation, ActionStatus.EDITED
            record.edited_version = action_version(action.tool, arguments, operation)
        state, budgets = self.task.state, self.task.valid_spec.budgets
        if state.usage.actions >= budgets.max_actions:
            self.task.emit(EventType.BUDGET_EXHAUSTED, budget="max_actions", limit=budgets.max_actions)
            raise HandOff(f"action budget exhausted ({budgets.max_actions} actions)")
        state.usage.actions += 1
        output_ref = None
        if isinstance(operation, SandboxCommand):
            output, output_ref = await self.sandbox.exec(action, operation)
        elif isinstance(operation, Delegation):
            output, ok = await self.delegations.delegate(action, operation)
            if not ok:
                status = ActionStatus.FAILED
        elif isinstance(operation, FunctionCall | McpCall):
            called = await self.tools.run(action, operation)
            output, output_ref = called.output, called.output_ref
            if called.is_error:
                status = ActionStatus.FAILED
        else:
            authz = self.approvals.write_authz(item)
            checked = None
            if authz is not None:
                # Causal order: authz.checked goes in once the write has answered past its check,
                # before its outcome's events (it came after write.confirmed before issue 38). No
                # patch: no command changes, only the order of the events the state records.
                checked = partial(self.approvals.authorization, item, True, _CHECKED_BY_WRITE)
            try:
                output = await self.writes.write(action, operation, authz, checked)
            except WriteRevoked as revoked:
                # Nothing was written: the action did not run, and waits for a decision again.
                state.usage.actions -= 1
                self.task.set_phase(TaskPhase.RUNNING)
                self.approvals.authorization(item, False, revoked.reason)
                return None
        if output is None:
            return _result(action, ActionStatus.FAILED, "error: the business write did not happen")
        return ActionResult(
            call_id=action.call_id,
            tool=action.tool,
            status=status,
            output=output,
            output_ref=output_ref,
            edited_arguments=arguments if status is ActionStatus.EDITED else None,
        )

    async def plan(self, tool: str, arguments: dict[str, Any], owner: str = "") -> PlanResult:
        """The tool's own check of ``arguments`` (``agent.plan``): its operation, or why not. ``owner``
        is the SDK agent that proposed the call (its tool first: a specialist reached by handoff)."""
        return await self.placement.execute(
            "agent",
            AgentActivities.plan,
            PlanInput(
                agent=self.task.valid_spec.agent,
                tool=tool,
                arguments=arguments,
                mcp_catalog_ref=self.task.state.mcp_catalog_ref,
                owner=owner,
            ),
            options.PLAN,
            summary=f"check {tool}'s arguments",
        )

    async def edit_problem(self, decision: ApprovalDecision) -> str | None:
        """Why the tool refuses ``decision``'s edited arguments, or None (also when the request is
        unknown, which the decision's other checks report, or the check itself could not run: the edit
        is then checked again before its action runs)."""
        request = find_request(self.task.state.requests, decision.request_id)
        if request is None or decision.edited_args is None:
            return None
        if isinstance(request.action.operation, BudgetRaise):
            add = decision.edited_args.get("add")
            if isinstance(add, int | float) and not isinstance(add, bool) and add > 0:
                return None
            return f"an extension's edited add must be a positive number, not {add!r}"
        try:
            plan = await self.plan(
                request.action.tool,
                {**request.action.arguments, **decision.edited_args},
                owner=request.action.agent,
            )
        except (ActivityError, HandOff):
            return None  # not in an update handler: before the action runs, where a hand-off ends the task
        if plan.operation is not None:
            return None
        return f"the approver's edited arguments are invalid: {plan.error}"

    def runs_command(self, item: BatchItem) -> bool:
        """Whether ``item`` will run a sandbox command once decided (allowed, or approved)."""
        if not isinstance(item.action.operation, SandboxCommand) or item.verdict is PolicyVerdict.DENY:
            return False
        record = self.approvals.decision_for(item)
        return item.verdict is PolicyVerdict.ALLOW or (
            record is not None and record.decision is not DecisionKind.REJECT
        )


def _result(action: ProposedAction, status: ActionStatus, output: str) -> ActionResult:
    return ActionResult(call_id=action.call_id, tool=action.tool, status=status, output=output)
