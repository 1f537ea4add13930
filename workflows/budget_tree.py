"""Budgets across a tree of tasks (``BUDGET_TREE_PATCH``): a sub-task draws a reservation from what
its parent has left and its spend rolls up into the parent's; past a soft limit the task notifies
once; at a hard limit it asks a named principal to extend the budget (an approval request like any
other, in the batch) instead of handing off. The arithmetic is ``workflows.budgets``'; this keeps the
state. Workflow code: deterministic."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.actions import (
        ActionResult,
        ActionStatus,
        BudgetRaise,
        EffectClass,
        ProposedAction,
        action_version,
    )
    from agent_worker.schemas.approvals import DecisionKind, DecisionRecord
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.notify import BudgetNotice, NotifyInput
    from agent_worker.schemas.tasks import BatchItem, Budgets, PolicyVerdict, Reservation, TaskResult, Usage
    from agent_worker.telemetry import metrics

from agent_worker.workflows.approvals import ApprovalDesk
from agent_worker.workflows.budgets import (
    Exhausted,
    child_budgets,
    effective,
    exhausted,
    left,
    past_soft_limit,
    share,
)
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.sla import send_notice

# The tool name an extension request carries (what approvers see, and what ``revoke --tool`` names).
EXTEND_TOOL = "budget.extend"


def is_extension(item: BatchItem) -> bool:
    """Whether ``item`` is the task's own budget-extension request (not a model's call)."""
    return isinstance(item.action.operation, BudgetRaise)


class BudgetKeeper:
    """A task's budgets as a node of a tree. ``tree`` is decided once per run (``AgentTaskWorkflow.run``);
    off, budgets are the spec's own copy, as before the patch."""

    def __init__(self, task: TaskContext, *, approvals: ApprovalDesk) -> None:
        self.task = task
        self.approvals = approvals
        self.tree = False

    def limits(self) -> Budgets:
        """The task's budgets with what approved extensions added."""
        budgets = self.task.valid_spec.budgets
        return effective(budgets, self.task.state.budget_added) if self.tree else budgets

    # ---- the checks ----------------------------------------------------------------------------

    def check(self, *, before_turn: bool) -> bool:
        """True while the budgets have room. At a limit: False when an extension request is now open
        (in the batch), else the task hands off.

        Raises:
            HandOff: a budget is used up and cannot (or may no more) be extended.
        """
        state = self.task.state
        assert state.started_at is not None
        elapsed = (workflow.now() - state.started_at).total_seconds()
        used_up = exhausted(
            self.limits(), state.usage, elapsed, tree=self.tree, ahead=self.tree and before_turn
        )
        if used_up is None:
            return True
        if self.tree and not before_turn and self.extendable(used_up):
            return True  # the next turn's check asks for the extension, once this batch has run
        self.task.emit(
            EventType.BUDGET_EXHAUSTED, budget=used_up.budget, limit=used_up.limit, used=used_up.used
        )
        if self.tree and self.extendable(used_up):
            self.ask(used_up)
            return False
        raise HandOff(used_up.reason)

    def extendable(self, used_up: Exhausted) -> bool:
        extension = self.task.valid_spec.budgets.extension
        return (
            extension is not None
            and self.task.state.extensions < extension.times
            and extension.adds(used_up.budget) is not None
        )

    def ask(self, used_up: Exhausted) -> None:
        """Put an extension of ``used_up`` to the extension's approvers, as a request in the batch."""
        spec, state = self.task.valid_spec, self.task.state
        extension = spec.budgets.extension
        assert extension is not None
        add = extension.adds(used_up.budget)
        assert add is not None
        state.extensions += 1
        raise_by = BudgetRaise(
            budget=used_up.budget, limit=used_up.limit, used=round(used_up.used, 6), add=add
        )
        arguments = raise_by.model_dump(mode="json", include={"budget", "limit", "used", "add"})
        action = ProposedAction(
            call_id=f"budget-extension-{state.extensions}",
            tool=EXTEND_TOOL,
            effect=EffectClass.WRITE,
            arguments=arguments,
            operation=raise_by,
            version=action_version(EXTEND_TOOL, arguments, raise_by),
            turn=state.turn,
            agent=state.current_agent or spec.agent,
        )
        item = BatchItem(
            action=action,
            verdict=PolicyVerdict.REQUIRE_APPROVAL,
            policy_reason=(
                f"{used_up.reason}; extend it by {add:g}? "
                f"(extension {state.extensions} of at most {extension.times})"
            ),
        )
        state.batch.append(item)
        self.task.emit(
            EventType.BUDGET_EXTENSION_REQUESTED,
            budget=used_up.budget,
            limit=used_up.limit,
            used=used_up.used,
            add=add,
            approvers=list(extension.approvers),
        )
        self.approvals.request(item, list(extension.approvers), extension.sla)

    def extend(self, item: BatchItem, record: DecisionRecord | None) -> ActionResult:
        """Apply an approved extension (an edit may change ``add``; a bad one keeps the asked amount)."""
        operation = item.action.operation
        assert isinstance(operation, BudgetRaise) and record is not None
        add = operation.add
        if record.decision is DecisionKind.EDIT and record.edited_args:
            edited = record.edited_args.get("add")
            if isinstance(edited, int | float) and not isinstance(edited, bool) and edited > 0:
                add = float(edited)
        state = self.task.state
        state.budget_added[operation.budget] = state.budget_added.get(operation.budget, 0.0) + add
        limit = getattr(self.limits(), operation.budget)
        self.task.emit(
            EventType.BUDGET_EXTENDED,
            budget=operation.budget,
            add=add,
            limit=limit,
            principal=record.principal,
            request_id=record.request_id,
        )
        metrics.workflow_counter("agent_worker_budget_extensions", budget=operation.budget)
        return ActionResult(
            call_id=item.action.call_id,
            tool=item.action.tool,
            status=ActionStatus.EDITED if add != operation.add else ActionStatus.EXECUTED,
            output=f"{operation.budget} extended by {add:g} to {limit:g} by {record.principal}",
        )

    def settle(self, items: list[BatchItem]) -> None:
        """After a batch ran: an extension that was not granted (rejected, expired, not run) hands
        the task off, explained.

        Raises:
            HandOff: an extension request of the batch ended without adding to the budget.
        """
        for item in items:
            result = item.result
            if not is_extension(item) or result is None:
                continue
            if result.status in (ActionStatus.EXECUTED, ActionStatus.EDITED):
                continue
            operation = item.action.operation
            assert isinstance(operation, BudgetRaise)
            used_up = Exhausted(operation.budget, operation.limit, operation.used)
            raise HandOff(f"{used_up.reason}; extension {item.request_id} not granted: {result.output}")

    # ---- soft limits ---------------------------------------------------------------------------

    async def notice_soft_limits(self) -> None:
        """Notify once per shared budget past its soft limit (``notify.send``); a notifier that stays
        down is recorded, and the task goes on."""
        if not self.tree:
            return
        spec, state = self.task.valid_spec, self.task.state
        budgets = self.limits()
        for name, limit, used in past_soft_limit(budgets, state.usage, state.soft_noticed):
            state.soft_noticed.append(name)
            extension = budgets.extension
            recipients = list(budgets.notify) or (list(extension.approvers) if extension else [])
            notice = BudgetNotice(budget=name, limit=limit, used=used, soft_limit=budgets.soft_limit or 0.0)
            metrics.workflow_counter("agent_worker_budget_soft_limits", budget=name)
            if not recipients:
                self.task.emit(EventType.BUDGET_SOFT_LIMIT, notified=False, **notice.model_dump())
                continue
            note = NotifyInput(
                key=f"{self.task.task_id}/{state.run_chain or ''}/budget/{name}/soft",
                kind="budget",
                task_id=self.task.task_id,
                tenant=spec.tenant,
                agent=spec.agent,
                recipients=recipients,
                budget=notice,
            )
            summary = f"{name} past {notice.soft_limit:.0%}: tell {', '.join(recipients)}"
            await send_notice(self.task, note, EventType.BUDGET_SOFT_LIMIT, summary, **notice.model_dump())

    # ---- sub-tasks -----------------------------------------------------------------------------

    def reserve(self, call_id: str) -> Budgets | str:
        """The budgets of the sub-task ``call_id`` starts: its reservation, an equal share (among the
        sub-tasks of the batch not yet started) of what is left once running siblings' shares are set
        aside; or why it cannot start (nothing left)."""
        state = self.task.state
        budgets = self.limits()
        if not self.tree:
            return budgets
        starting = sum(
            1
            for item in state.batch
            if item.result is None
            and item.action.effect is EffectClass.DELEGATE
            and item.verdict is not PolicyVerdict.DENY
            and item.action.call_id not in state.reservations
        )
        remaining = left(budgets, state.usage, list(state.reservations.values()))
        reservation = share(remaining, max(starting, 1))
        if reservation is None:
            spent_out = [n for n, v in remaining.items() if v is not None and v <= 0] or list(remaining)
            held = ", ".join(spent_out)
            return f"no budget left for a sub-task ({held} used up or held by running sub-tasks)"
        state.reservations[call_id] = reservation
        wall = budgets.max_wall_seconds
        if wall is not None:
            assert state.started_at is not None
            wall = max(wall - (workflow.now() - state.started_at).total_seconds(), 0.001)
        return child_budgets(budgets, reservation, wall)

    def reserved(self, call_id: str) -> dict[str, object]:
        """What sub-task ``call_id`` holds, for its ``delegation.started`` event ({} before the patch)."""
        reservation = self.task.state.reservations.get(call_id)
        return {"reserved": reservation.model_dump(mode="json")} if reservation is not None else {}

    def roll_up(self, call_id: str, child: Usage | None) -> None:
        """Count what sub-task ``call_id`` spent as the task's (unknown: all of its reservation), and
        free its reservation."""
        state = self.task.state
        reservation = state.reservations.pop(call_id, None)
        if not self.tree:
            return
        usage = state.usage
        usage.sub_tasks += 1
        if child is None:
            held = reservation or Reservation()
            usage.sub_task_cost_usd += held.cost_usd or 0.0
            usage.sub_task_output_tokens += held.tokens or 0
            usage.sub_task_model_calls += held.model_calls or 0
            return
        usage.sub_task_cost_usd += child.cost_usd + child.sub_task_cost_usd
        usage.sub_task_input_tokens += child.input_tokens + child.sub_task_input_tokens
        usage.sub_task_output_tokens += child.output_tokens + child.sub_task_output_tokens
        usage.sub_task_model_calls += child.model_calls + child.sub_task_model_calls


def record_turn(usage: Usage, cost_usd: float, tokens: int, calls: int) -> None:
    """Remember the costliest turn (what the next turn is assumed to take)."""
    usage.costliest_turn_usd = max(usage.costliest_turn_usd, cost_usd)
    usage.largest_turn_tokens = max(usage.largest_turn_tokens, tokens)
    usage.largest_turn_calls = max(usage.largest_turn_calls, calls)


def child_usage(result: TaskResult | None, details: object) -> Usage | None:
    """A finished sub-task's usage: from its result, or from its failure's details."""
    if result is not None:
        return result.usage
    if isinstance(details, dict) and "usage" in details:
        return Usage.model_validate(details["usage"])
    return None


__all__ = ["EXTEND_TOOL", "BudgetKeeper", "child_usage", "is_extension", "record_turn"]
