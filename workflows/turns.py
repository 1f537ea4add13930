"""Running the agent's turns: one ``agent.turn`` (interrupted by follow-up input when the task's
policy says so), its usage and evidence recorded, its proposed actions put through the policy into
the task's batch. Workflow code: deterministic, no I/O of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.agent.turn import AgentActivities
    from agent_worker.schemas.actions import without_preview
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import BatchItem, PolicyVerdict, TaskPhase
    from agent_worker.schemas.turns import TurnInput, TurnResult

from agent_worker.workflows import fork, options
from agent_worker.workflows.approvals import ApprovalDesk
from agent_worker.workflows.budget_tree import BudgetKeeper, record_turn
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.evidence import EvidenceKeeper
from agent_worker.workflows.failures import failure_code, failure_message
from agent_worker.workflows.grants import query_for
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.patches import (
    INTERRUPT_PATCH,
    LEAN_EVIDENCE_PATCH,
    MCP_UNAVAILABLE_PATCH,
    patched,
)
from agent_worker.workflows.placement import Placement
from agent_worker.workflows.policy import evaluate
from agent_worker.workflows.questions import route
from agent_worker.workflows.takeover import record_takeover


class TurnRunner:
    """Runs a task's next agent turn. The task's ``end`` and ``complete`` are the workflow's own: a
    turn that ends the task (a final answer, or an outcome the model had to see first) calls them."""

    def __init__(
        self,
        task: TaskContext,
        *,
        placement: Placement,
        budget: BudgetKeeper,
        approvals: ApprovalDesk,
        evidence_keeper: EvidenceKeeper,
        end: Callable[[TaskPhase, str | None], Awaitable[None]],
        complete: Callable[[], Awaitable[None]],
    ) -> None:
        self.task = task
        self.placement = placement
        self.budget = budget
        self.approvals = approvals
        self.evidence_keeper = evidence_keeper
        self.end = end
        self.complete = complete
        # Shorthands for the task's fields.
        self.task_id, self.spec, self.state, self.emit = task.task_id, task.spec, task.state, task.emit

    async def next_turn(self) -> None:
        spec, state = self.spec, self.state
        assert spec is not None
        await self.budget.notice_soft_limits()
        if not self.budget.check(before_turn=True):
            return  # a budget ran out: its extension request is in the batch
        turn = state.turn + 1
        follow_ups = len(state.follow_ups)
        self.emit(
            EventType.TURN_STARTED, turn=turn, results=len(state.pending_results), follow_ups=follow_ups
        )
        workflow.set_current_details(f"Agent turn {turn} running")
        lean = patched(LEAN_EVIDENCE_PATCH)
        # A turn that continues a run or a conversation does not read the prompt (nor the preview of
        # a result it reads by reference): neither goes into the history again.
        continues = state.run_state_ref is not None or state.conversation_ref is not None
        turn_input = TurnInput(
            task_id=self.task_id,
            agent=spec.agent,
            turn=turn,
            prompt="" if lean and continues else spec.prompt,
            inputs=state.inputs,
            run_state_ref=state.run_state_ref,
            results=[without_preview(r) for r in state.pending_results] if lean else state.pending_results,
            conversation_ref=state.conversation_ref,
            follow_ups=[f.text for f in state.follow_ups[:follow_ups]],
            run_chain=state.run_chain,
            mcp_catalog_ref=state.mcp_catalog_ref,
            current_agent=state.current_agent,
            tenant=spec.tenant,
            grants=query_for(self.task),
            model=spec.model,
        )
        # Placement checks the input's size (and names this summary if it is too large).
        summary = f"agent turn {turn} ({len(state.pending_results)} results, {follow_ups} follow-ups)"
        try:
            recorded = fork.recorded_turn(state, turn)  # a fork replaying its parent's turns
            if recorded is not None:
                result = recorded
            elif spec.policy.on_input == "interrupt" and patched(INTERRUPT_PATCH):
                interrupted = await self.interruptible_turn(turn_input, summary, follow_ups)
                if interrupted is None:
                    # Nothing of the cancelled turn is kept: the next one starts where it did, with the input.
                    added = len(state.follow_ups) - follow_ups
                    self.emit(EventType.TURN_INTERRUPTED, turn=turn, follow_ups=added)
                    return
                result = interrupted
            else:
                result = await self.placement.execute(
                    "agent", AgentActivities.turn, turn_input, options.TURN, summary=summary
                )
        except ActivityError as err:
            # An MCP server the turn needs (to list its tools, for a read tool) stayed unreachable
            # through the turn's attempts: a human must see to the server; the task is not broken.
            if failure_code(err) == "mcp_unavailable" and patched(MCP_UNAVAILABLE_PATCH):
                raise HandOff(f"agent turn {turn} did not finish: {failure_message(err)}") from None
            raise
        # Input that arrived while the turn ran stays for the next one.
        del state.follow_ups[:follow_ups]
        state.turn = turn
        state.run_state_ref = result.run_state_ref
        state.conversation_ref = result.conversation_ref
        state.pending_results = list(result.invalid)
        # Data only: the agent a handoff moved the run to (kept when a turn from an older worker says none).
        state.current_agent = result.agent or state.current_agent
        # The agent's MCP tools as first listed: every later turn of the task sees the same ones.
        state.mcp_catalog_ref = state.mcp_catalog_ref or result.mcp_catalog_ref
        state.artifacts.extend(a for a in result.artifacts if a not in state.artifacts)
        usage = state.usage
        usage.turns += 1
        usage.model_calls += result.usage.model_calls
        usage.replayed_model_calls += result.usage.replayed_calls
        usage.input_tokens += result.usage.input_tokens
        usage.output_tokens += result.usage.output_tokens
        usage.cost_usd += result.usage.cost_usd
        usage.model = result.model or usage.model
        usage.provider, usage.api = result.usage.provider or usage.provider, result.usage.api or usage.api
        if self.budget.tree:
            tokens = result.usage.input_tokens + result.usage.output_tokens
            record_turn(usage, result.usage.cost_usd, tokens, result.usage.model_calls)
        self.evidence_keeper.record_tool_calls(result)
        record_takeover(self.task, "turn", result.takeover_seconds, turn=turn)
        if result.compacted is not None:
            # Data only (the turn did it): the replaced items are among the turn's artifacts.
            self.emit(EventType.CONTEXT_COMPACTED, turn=turn, **result.compacted.model_dump(mode="json"))
        self.emit(
            EventType.TURN_FINISHED,
            turn=turn,
            status=result.status,
            model=result.model,
            agent=result.agent,
            proposed=[a.tool for a in result.proposed],
            invalid=[r.call_id for r in result.invalid],
            model_calls=result.usage.model_calls,
            replayed_calls=result.usage.replayed_calls,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            cost_usd=result.usage.cost_usd,
            provider=result.usage.provider,
            api=result.usage.api,
            calls=[
                c.model_dump(mode="json")
                for c in (
                    result.usage.records(result.model) if patched(LEAN_EVIDENCE_PATCH) else result.usage.calls
                )
            ],
        )
        if state.end_after_turn is not None:
            # The model has now seen the outcome that ends the task (e.g. a rejection).
            state.final_output = result.final_output
            await self.end(state.end_after_turn, state.reason or state.end_after_turn.value)
            return
        if result.status == "final":
            state.final_output = result.final_output
            if not state.follow_ups:
                await self.complete()
            return
        self.budget.check(before_turn=False)
        for action in result.proposed:
            self.emit(
                EventType.ACTION_PROPOSED,
                call_id=action.call_id,
                tool=action.tool,
                version=action.version,
                agent=action.agent,
            )
            decision = fork.verdict(state, action) or evaluate(
                spec.policy, action, agent=spec.agent, tenant=spec.tenant, labels=spec.labels
            )
            decision = route(decision, action, spec.policy)  # a question always goes to a person
            state.batch.append(
                BatchItem(action=action, verdict=decision.verdict, policy_reason=decision.reason)
            )
            self.emit(
                EventType.POLICY_DECIDED,
                call_id=action.call_id,
                verdict=decision.verdict.value,
                reason=decision.reason,
            )
            if decision.verdict is PolicyVerdict.REQUIRE_APPROVAL:
                self.approvals.request(
                    state.batch[-1], list(decision.approvers), decision.sla, quorum=decision.quorum
                )

    async def interruptible_turn(
        self, turn_input: TurnInput, summary: str, follow_ups: int
    ) -> TurnResult | None:
        """Run the turn; when follow-up input arrives first, cancel it and wait until it has stopped
        (None). A turn that finished before the cancellation reached it answers as usual."""
        running = asyncio.create_task(
            self.placement.execute(
                "agent", AgentActivities.turn, turn_input, options.TURN_INTERRUPTIBLE, summary=summary
            )
        )
        await workflow.wait_condition(lambda: running.done() or len(self.state.follow_ups) > follow_ups)
        if running.done():
            return running.result()
        running.cancel()
        try:
            return await running
        except (asyncio.CancelledError, ActivityError) as err:
            if not is_cancelled_exception(err) or workflow.cancellation_reason() is not None:
                raise  # a failure, or the task itself was cancelled meanwhile
            return None
