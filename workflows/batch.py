"""Working through the batch of one model response: the actions it proposed, each with the policy's
verdict, run once decided. Workflow code: deterministic, no I/O of its own.

Since ``PARALLEL_BATCH_PATCH`` the actions run concurrently, ``PolicySpec.parallel_actions`` at a
time, and the allowed ones run before the task waits for the approvals its other actions need
(unless ``PolicySpec.allowed_first`` is off), so an approver sees the results of the computation
the model asked for beside the request. Each approved action is re-authorized right before it runs.
Results go back to the model in the batch's order, whatever order they finished in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.actions import ActionResult
    from agent_worker.schemas.tasks import BatchItem, BatchView, PolicyVerdict, TaskPhase

from agent_worker.workflows import bounds
from agent_worker.workflows.approvals import ApprovalDesk
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.effects import EffectRunner
from agent_worker.workflows.patches import MINIMUM_ROUND_TRIPS_PATCH, PARALLEL_BATCH_PATCH, patched

# What ``status`` shows of each batch result.
STATUS_OUTPUT_CHARS = 2_000


class BatchRunner:
    """Settles a task's batch: decisions awaited, actions run, results collected."""

    def __init__(self, task: TaskContext, *, approvals: ApprovalDesk, effects: EffectRunner) -> None:
        self.task = task
        self.approvals = approvals
        self.effects = effects

    async def settle(self, wait_for_decisions: Callable[[], Awaitable[None]]) -> list[ActionResult]:
        """Run every action of the batch once decided (``wait_for_decisions`` waits, durably, until
        no request is pending); the results, in the batch's order."""
        if patched(PARALLEL_BATCH_PATCH):
            await self.settle_concurrently(wait_for_decisions)
        else:
            await self.settle_in_order(wait_for_decisions)
        return [item.result for item in self.task.state.batch if item.result is not None]

    async def settle_concurrently(self, wait_for_decisions: Callable[[], Awaitable[None]]) -> None:
        batch = self.task.state.batch
        if self.task.valid_spec.policy.allowed_first:
            ready = [i for i in batch if i.result is None and i.verdict is not PolicyVerdict.REQUIRE_APPROVAL]
            if ready:
                self.task.set_phase(TaskPhase.RUNNING)
                await self.run_items(ready)
        while True:
            await wait_for_decisions()
            self.task.set_phase(TaskPhase.RUNNING)
            if not await self.run_items([i for i in batch if i.result is None]):
                return

    async def run_items(self, items: list[BatchItem]) -> bool:
        """Run ``items`` concurrently (``parallel_actions`` at a time), each approved one re-authorized
        first. Every item settles before this returns (or raises the first failure, a hand-off say), so
        nothing is left in flight. True when a request opened again (a revoked permission, an edit the
        tool refuses)."""
        limit = asyncio.Semaphore(self.task.valid_spec.policy.parallel_actions)
        reopened: list[str] = []
        if self.task.state.sandbox is None and patched(MINIMUM_ROUND_TRIPS_PATCH):
            # A lone first command creates the sandbox itself; several would queue behind it, so the
            # sandbox is made first for them all to run at once.
            commands = [i for i in items if self.effects.runs_command(i)]
            if len(commands) > 1:
                await self.effects.sandbox.ensure_sandbox()

        async def run(item: BatchItem) -> None:
            async with limit:
                if not await self.approvals.reauthorize(item):
                    reopened.append(item.action.call_id)
                    return
                result = await self.effects.run(item)
                if result is None:
                    reopened.append(item.action.call_id)
                    return
                item.result = result

        outcomes = await asyncio.gather(*(run(item) for item in items), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return bool(reopened)

    async def settle_in_order(self, wait_for_decisions: Callable[[], Awaitable[None]]) -> None:
        """Before ``PARALLEL_BATCH_PATCH``: every decision first, then the actions one by one."""
        while True:
            await wait_for_decisions()
            self.task.set_phase(TaskPhase.RUNNING)
            reopened = False
            for item in self.task.state.batch:
                if item.result is not None:
                    continue
                if not await self.approvals.reauthorize(item):
                    reopened = True  # the approver lost the permission: the request is open again
                    break
                result = await self.effects.run(item)
                if result is None:
                    reopened = True  # the approver's edit cannot take effect: the request is open again
                    break
                item.result = result
            if not reopened:
                break


def batch_view(item: BatchItem) -> BatchView:
    """What ``status`` shows of one batch item."""
    result = item.result
    if result is not None:
        state: Any = result.status
    elif item.verdict is PolicyVerdict.REQUIRE_APPROVAL and item.request_id is not None:
        state = "waiting"
    else:
        state = "pending"
    return BatchView(
        call_id=item.action.call_id,
        tool=item.action.tool,
        effect=item.action.effect,
        verdict=item.verdict,
        agent=item.action.agent,
        request_id=item.request_id,
        state=state,
        output=bounds.cut(result.output, STATUS_OUTPUT_CHARS) if result is not None else None,
    )
