"""``AgentTask``: one agent task's whole lifecycle.

The loop: run an agent turn; evaluate the policy on each proposed effectful action; publish approval
requests and wait (durably, until a deadline) for decisions; run the approved actions as their own
activities; feed the results into the next turn. The task completes only with evidence.

Decisions come as the signal ``submit_decision`` or the update ``decide`` (same checks; the update's
validator refuses bad ones before they reach history). Queries: ``status``, ``pending_approvals``.
"""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from activities.agent.turn import AgentActivities
    from activities.artifacts import ArtifactActivities
    from activities.events import EventActivities
    from activities.sandbox.activities import SandboxActivities, SandboxHere
    from activities.stores import live_events
    from activities.tenants import TenantActivities
    from activities.threads import ThreadActivities
    from schemas import visibility
    from schemas.actions import ActionResult, ActionStatus, without_preview
    from schemas.approvals import (
        ApprovalRequest,
        DecisionKind,
        DecisionOutcome,
    )
    from schemas.artifacts import ArtifactRef, IngestInput
    from schemas.events import (
        Event,
        EventType,
        PublishEventsInput,
        PublishEventsResult,
        delivery_basis,
        event_id_for,
    )
    from schemas.sandbox import DestroySandboxInput, SandboxRef
    from schemas.tasks import (
        BatchItem,
        FollowUp,
        PolicyVerdict,
        TaskInput,
        TaskPhase,
        TaskResult,
        TaskSpec,
        TaskState,
        TaskStatus,
    )
    from schemas.tenants import AdmitInput, ReleaseInput
    from schemas.threads import ResumeThreadInput
    from schemas.turns import TurnInput, TurnResult
    from schemas.validation import InvalidPayload, parse_decision, parse_follow_up, parse_task_input
    from telemetry import metrics

from workflows import bounds, options
from workflows.approvals import ApprovalDesk
from workflows.batch import BatchRunner, batch_view
from workflows.budget_tree import BudgetKeeper, is_extension, record_turn
from workflows.context import TaskContext
from workflows.decisions import expiry_problem, why_not
from workflows.effects import EffectRunner
from workflows.evidence import EvidenceKeeper, evidence_of
from workflows.failures import failure_code, failure_message
from workflows.handoff import HandOff
from workflows.patches import (
    BOUNDED_PATCH,
    BUDGET_TREE_PATCH,
    CHECK_EDITS_PATCH,
    DELIVER_EVENTS_PATCH,
    INTERRUPT_PATCH,
    LEAN_EVIDENCE_PATCH,
    LOCAL_DELIVERY_PATCH,
    MCP_UNAVAILABLE_PATCH,
    MINIMUM_ROUND_TRIPS_PATCH,
    PACKED_EVENTS_PATCH,
    RUN_CHAIN_PATCH,
    TENANT_ADMISSION_PATCH,
    THREADS_PATCH,
    ask_patches_at_start,
    patched,
)
from workflows.placement import Placement, at_home, home_unanswered
from workflows.policy import evaluate
from workflows.sla import ApprovalClock
from workflows.takeover import record_takeover
from workflows.threads import first_message

EVENT_TAIL = 100
# What ``status`` shows of the prompt.
STATUS_PROMPT_CHARS = 500
# Undelivered events that trigger a delivery between steps (it also happens before every wait for a
# human, before continue-as-new, and at the end); each delivery is a marker in the history. 25 in
# runs begun before patch ``lean-evidence``.
DELIVERY_BATCH = 50
DELIVERY_BATCH_BEFORE = 25
# Ignored decisions and inputs recorded one by one between two event deliveries; past it they are
# counted and summed up in one event, so a flood of bad signals costs a counter each.
IGNORED_EVENTS_PER_DELIVERY = 100
# Follow-up input waiting for the next turn: more is refused at arrival, with the reason.
MAX_PENDING_FOLLOW_UPS = 100
MAX_PENDING_FOLLOW_UP_BYTES = 400_000
# One ``events.publish`` input at most (a delivery of more is split).
DELIVERY_BYTES = 400_000


UNDECODABLE = "payload is not JSON this worker can decode (nested too deeply, or not JSON at all)"


def decode(raw: RawValue) -> Any:
    """The JSON value a client sent. Decoded here, not by the SDK, so a payload the converter cannot
    decode (nested too deeply, not JSON) is refused like any other bad input instead of failing
    workflow tasks over and over (a start) or being dropped unrecorded (a signal).

    Raises:
        InvalidPayload: the payload is not JSON this worker can decode.
    """
    try:
        return workflow.payload_converter().from_payload(raw.payload)
    except Exception:
        raise InvalidPayload(UNDECODABLE) from None


@workflow.defn(name="AgentTask")
class AgentTaskWorkflow:
    """The lifecycle of one agent task (workflow id = task id)."""

    @workflow.init
    def __init__(self, raw: RawValue) -> None:
        self.task_id = workflow.info().workflow_id
        self.input_error: str | None = None
        try:
            task = parse_task_input(decode(raw))
            if workflow.info().continued_run_id is None:
                bounds.check_spec(task.spec)
            if (
                task.state is not None
                and workflow.info().continued_run_id is None
                and task.state.schema_version <= TaskState.model_fields["schema_version"].default
            ):
                # A state is what a run hands the next one; from a client it would be trusted blindly.
                raise InvalidPayload(
                    "invalid task input: state: only continue-as-new carries a state; "
                    'start with the bare TaskSpec or {"spec": ...}'
                )
        except InvalidPayload as err:
            self.input_error = str(err)
            task = None
        self.spec: TaskSpec | None = task.spec if task else None
        self.state: TaskState = (task.state if task and task.state else None) or TaskState()
        if task is not None and task.state is None and patched(RUN_CHAIN_PATCH):
            # Decided once, at the chain's start, and carried by continue-as-new: a chain that began
            # before run chains keeps the task id alone (its sandbox, signatures, keys) to its end.
            self.state.run_chain = workflow.info().first_execution_run_id
        # The helpers see the task through this narrow context, never the workflow itself.
        context = TaskContext(
            task_id=self.task_id,
            spec=self.spec,
            state=self.state,
            input_error=self.input_error,
            emit=self.emit,
            emit_ignored=self.emit_ignored,
            set_phase=self.set_phase,
        )
        self.context = context
        self.placement = Placement(context)
        self.approvals = ApprovalDesk(context)
        self.sla = ApprovalClock(context, publish=self.publish)
        self.budget = BudgetKeeper(context, approvals=self.approvals)
        self.effects = EffectRunner(
            context, approvals=self.approvals, placement=self.placement, budget=self.budget
        )
        self.batch_runner = BatchRunner(context, approvals=self.approvals, effects=self.effects)
        self.evidence_keeper = EvidenceKeeper(context)
        self.delivering = False
        # The minimum of round trips (``MINIMUM_ROUND_TRIPS_PATCH``; decided in ``run``).
        self.lean = False
        # Events delivered by a local activity (``LOCAL_DELIVERY_PATCH``; decided in ``run``), and this
        # run's index in its chain (part of each delivery's basis).
        self.local_delivery = False
        self.run_index = 0
        # What the search attributes were last set to (``publish``): only changes are upserted.
        self.published: dict[str, Any] = {}
        # On a thread, with the code that knows threads (decided in ``run``).
        self.threaded = False

    # ---- entry ---------------------------------------------------------------------------------

    @workflow.run
    async def run(self, raw: RawValue) -> TaskResult:
        """Validate the raw input here (not in the SDK's decoder) so bad input fails the workflow
        once, with the field named, instead of failing workflow tasks forever."""
        if self.spec is None:
            raise ApplicationError(
                self.input_error or "invalid task input", type="InvalidTaskInput", non_retryable=True
            )
        spec = self.spec
        if self.state.schema_version > TaskState.model_fields["schema_version"].default:
            # State written by newer code: this code cannot know what it means. Stop, explained.
            self.state.reason = (
                f"task state schema {self.state.schema_version} is newer than this worker understands "
                f"({TaskState.model_fields['schema_version'].default}); run it on a newer worker"
            )
            self.state.phase = TaskPhase.HANDED_OFF
            self.publish()
            return self.result()
        # Tasks that started before event delivery existed keep running as they began.
        self.delivering = patched(DELIVER_EVENTS_PATCH)
        # Decided here, in the first workflow task, so every later check of it answers the same.
        self.lean = patched(MINIMUM_ROUND_TRIPS_PATCH)
        if self.lean:
            ask_patches_at_start()  # before any local activity (why: ``PATCHES_AT_START``)
        self.local_delivery = self.lean and patched(LOCAL_DELIVERY_PATCH)
        self.run_index = self.state.usage.runs
        self.budget.tree = patched(BUDGET_TREE_PATCH)
        self.threaded = spec.thread is not None and patched(THREADS_PATCH)
        if self.state.phase is TaskPhase.RECEIVED:
            self.state.started_at = workflow.now()
            self.emit(EventType.TASK_STARTED, agent=spec.agent, tenant=spec.tenant)
            metrics.workflow_counter("agent_worker_tasks_started", agent=spec.agent, tenant=spec.tenant)
        self.publish()
        try:
            if self.state.phase is TaskPhase.RECEIVED and not await self.admit():
                return self.result()
            if self.state.phase in (TaskPhase.RECEIVED, TaskPhase.INITIALIZING):
                await self.initialize()
            while not self.state.phase.terminal:
                batch = DELIVERY_BATCH if patched(LEAN_EVIDENCE_PATCH) else DELIVERY_BATCH_BEFORE
                if self.undelivered() >= batch:
                    await self.deliver_events()
                await self.maybe_continue_as_new()
                if self.state.batch:
                    await self.settle_batch()
                else:
                    await self.next_turn()
        except HandOff as err:
            await self.end(TaskPhase.HANDED_OFF, str(err))
        except ApplicationError as err:
            # A local activity that failed for good (ingest, event delivery) comes as its own error,
            # not an ActivityError: the task ends ``failed``, explained, as for any activity.
            if not self.lean:
                raise
            await self.fail(err)
        except (asyncio.CancelledError, ActivityError, ChildWorkflowError) as err:
            reason = workflow.cancellation_reason()
            if isinstance(err, asyncio.CancelledError) and reason is None:
                raise  # evicted from the worker's cache, not cancelled: nothing to clean up
            if not is_cancelled_exception(err) or reason is None:
                assert not isinstance(err, asyncio.CancelledError)
                await self.fail(err)
            await self.end(TaskPhase.CANCELLED, f"cancelled on request {reason}".strip())
            raise
        return self.result()

    async def fail(self, err: ActivityError | ChildWorkflowError | ApplicationError) -> NoReturn:
        """An activity failed for good: end the task ``failed`` and fail the workflow, explained."""
        await self.end(TaskPhase.FAILED, f"{err.message}: {_cause(err)}")
        # A parent counts what its failed sub-task spent (``workflows.budget_tree``).
        details = [{"usage": self.state.usage.model_dump(mode="json")}] if self.budget.tree else []
        raise ApplicationError(
            f"task failed: {self.state.reason}", *details, type="TaskFailed", non_retryable=True
        ) from err

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

    async def initialize(self) -> None:
        assert self.spec is not None
        self.set_phase(TaskPhase.INITIALIZING)
        self.state.inputs = await self.ingest()
        if self.threaded and self.state.turn == 0 and not await self.resume_thread():
            return
        self.set_phase(TaskPhase.RUNNING)

    async def ingest(self) -> list[ArtifactRef]:
        """Store the task's inputs (``artifacts.ingest``): the input manifest. Since the minimum of
        round trips, in a local activity of the first workflow task, and not at all without inputs."""
        assert self.spec is not None
        ingest = IngestInput(task_id=self.task_id, files=self.spec.inputs)
        summary = f"store the task's {len(self.spec.inputs)} inputs"
        if not self.lean:
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

    def continue_as_new_due(self) -> bool:
        """Whether Temporal suggests continuing as new, or the task's own event limit is reached."""
        info = workflow.info()
        limit = self.spec.continue_as_new_after_events if self.spec else None
        return info.is_continue_as_new_suggested() or (
            limit is not None and info.get_current_history_length() >= limit
        )

    async def maybe_continue_as_new(self) -> None:
        if not self.continue_as_new_due():
            return
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self.evidence_keeper.archive_older()
        self.evidence_keeper.check_carriable()  # or hand off, explained
        self.emit(EventType.CONTINUED_AS_NEW, history_length=workflow.info().get_current_history_length())
        self.state.usage.runs += 1
        await self.deliver_events()
        workflow.continue_as_new(TaskInput(spec=self.spec, state=self.state))

    # ---- turns ---------------------------------------------------------------------------------

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
        self.details(f"Agent turn {turn} running")
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
        )
        # Placement checks the input's size (and names this summary if it is too large).
        summary = f"agent turn {turn} ({len(state.pending_results)} results, {follow_ups} follow-ups)"
        try:
            if spec.policy.on_input == "interrupt" and patched(INTERRUPT_PATCH):
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
        record_takeover(self.context, "turn", result.takeover_seconds, turn=turn)
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
            decision = evaluate(spec.policy, action)
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
                self.approvals.request(state.batch[-1], list(decision.approvers), decision.sla)

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

    # ---- approvals -----------------------------------------------------------------------------

    async def settle_batch(self) -> None:
        """Run the batch of the latest model response (``workflows.batch``), then queue its results
        for the next turn."""
        results = await self.batch_runner.settle(self.wait_for_decisions)
        # A budget extension is the task's own request, not a model's call: the model never sees it.
        self.budget.settle(self.state.batch)  # or hand off: an extension was not granted
        ours = {i.action.call_id for i in self.state.batch if is_extension(i)}
        self.state.pending_results.extend(r for r in results if r.call_id not in ours)
        self.state.batch = []
        assert self.spec is not None
        rejected = [r for r in results if r.status is ActionStatus.REJECTED]
        if rejected and self.spec.policy.on_reject == "end":
            self.state.end_after_turn = TaskPhase.REJECTED
            self.state.reason = rejected[0].output

    async def wait_for_decisions(self) -> None:
        """Wait (durably, until the first deadline) until no request is pending."""
        while self.approvals.pending():
            self.set_phase(TaskPhase.AWAITING_APPROVAL)
            await self.deliver_events()  # a waiting task's events are all in the sink
            if not self.approvals.pending():
                break  # decided while the events were being delivered
            pending = self.approvals.pending()
            timed = self.sla.governs(pending)  # reminders, escalations, the rule's expiry
            first_deadline = self.sla.next_moment(pending) if timed else min(r.deadline for r in pending)
            remaining = (first_deadline - workflow.now()).total_seconds()
            try:
                await workflow.wait_condition(
                    lambda: not self.approvals.pending() or self.continue_as_new_due() or self.sink_due(),
                    timeout=max(remaining, 0.001),
                )
            except TimeoutError:
                if timed:
                    await self.sla.on_time(self.approvals.pending())
                else:
                    self.hand_off_expired()
            await self.maybe_continue_as_new()

    def hand_off_expired(self) -> None:
        """Before ``APPROVAL_SLA_PATCH`` (and for requests without an sla): a request past its deadline
        hands the task off."""
        expired = [r.request_id for r in self.approvals.pending() if r.deadline <= workflow.now()]
        if expired:
            self.emit(EventType.APPROVAL_EXPIRED, request_ids=expired)
            raise HandOff(f"approval deadline passed for {', '.join(expired)}")

    @workflow.signal(name="submit_decision")
    def submit_decision(self, raw: RawValue) -> None:
        """A decision from any client. Anything wrong with it is recorded as ignored, with why."""
        value = None
        try:
            value = decode(raw)
            decision = parse_decision(value)
        except InvalidPayload as err:
            self.approvals.ignore(str(err), "signal", raw=value)
            return
        self.approvals.apply(decision, "signal")

    @workflow.signal(name="add_input")
    def add_input(self, raw: RawValue) -> None:
        """Follow-up input from a user ({"text": ..., "principal": ...} or a string); the next turn sees
        it. Input the task cannot take is recorded as ignored, with why."""
        if self.spec is None or self.state.phase.terminal:
            self.emit_ignored(EventType.INPUT_IGNORED, reason=f"the task is {self.state.phase.value}")
            return
        try:
            follow_up = parse_follow_up(decode(raw))
        except InvalidPayload as err:
            self.emit_ignored(EventType.INPUT_IGNORED, reason=str(err))
            return
        refused = self.follow_up_refused(follow_up)
        if refused is not None:
            self.emit_ignored(EventType.INPUT_IGNORED, reason=refused, principal=follow_up.principal)
            return
        self.state.follow_ups.append(follow_up)
        self.emit(EventType.INPUT_ADDED, principal=follow_up.principal, chars=len(follow_up.text))

    def follow_up_refused(self, follow_up: FollowUp) -> str | None:
        """Why ``follow_up`` cannot wait for the next turn, or None. What waits goes into the next
        turn's input, so it is capped at arrival rather than found too large later."""
        if not patched(BOUNDED_PATCH):
            return None
        pending = self.state.follow_ups
        if len(pending) >= MAX_PENDING_FOLLOW_UPS:
            return (
                f"refused: {len(pending)} follow-ups already wait for the next turn "
                f"(at most {MAX_PENDING_FOLLOW_UPS}); send it after the agent's next turn"
            )
        waiting = sum(len(f.text.encode()) for f in pending)
        size = len(follow_up.text.encode())
        if waiting + size > MAX_PENDING_FOLLOW_UP_BYTES:
            return (
                f"refused: {size:,} bytes of input would make {waiting + size:,} bytes waiting for the "
                f"next turn, more than the {MAX_PENDING_FOLLOW_UP_BYTES:,} a task holds; send it after "
                "the agent's next turn"
            )
        return None

    @workflow.update(name="decide")
    async def decide(self, raw: RawValue) -> DecisionOutcome:
        """Like ``submit_decision``, with a synchronous answer. An edit is first checked by the tool
        itself (``agent.plan``): one it refuses is not accepted, and the answer says why."""
        decision = parse_decision(decode(raw))
        reason = None
        if decision.decision is DecisionKind.EDIT and self.spec is not None and patched(CHECK_EDITS_PATCH):
            reason = await self.effects.edit_problem(decision)
            if reason is not None:
                self.approvals.ignore(reason, "update", decision)
        reason = reason or self.approvals.apply(decision, "update")
        return DecisionOutcome(
            request_id=decision.request_id,
            accepted=reason is None,
            phase=self.state.phase.value,
            detail=reason or f"{decision.decision.value} recorded",
        )

    @decide.validator
    def validate_decide(self, raw: RawValue) -> None:
        """Refuse a bad decision before it reaches history."""
        if self.input_error:
            raise ValueError(self.input_error)
        decision = parse_decision(decode(raw))
        assert self.spec is not None
        reason = expiry_problem(decision, workflow.now()) or why_not(
            self.state.requests, decision, self.task_id, self.spec.policy, self.state.run_chain
        )
        if reason is not None:
            raise ValueError(reason)

    # ---- queries -------------------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> TaskStatus:
        """Phase, pending requests, budgets, usage and the latest events."""
        spec = self.spec
        return TaskStatus(
            task_id=self.task_id,
            agent=spec.agent if spec else "",
            tenant=spec.tenant if spec else "",
            phase=self.state.phase,
            turn=self.state.turn,
            pending=self.approvals.pending(),
            budgets=self.budget.limits() if spec else TaskSpec.model_construct().budgets,
            usage=self.state.usage,
            reason=self.state.reason or self.input_error,
            final_output=self.state.final_output,
            ignored=self.state.ignored[-20:],
            ignored_count=self.state.ignored_count,
            last_events=self.state.events[-20:],
            colocated=self.state.colocated,
            prompt=bounds.cut(spec.prompt, STATUS_PROMPT_CHARS) if spec else "",
            batch=[batch_view(item) for item in self.state.batch],
            current_agent=self.state.current_agent,
        )

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[ApprovalRequest]:
        """Requests still waiting for a decision."""
        return self.approvals.pending()

    # ---- ending --------------------------------------------------------------------------------

    async def complete(self) -> None:
        """Confirm every write by lookup, release the sandbox, and complete."""
        await self.effects.confirm_writes()
        evidence = evidence_of(self.state)
        reason = None if evidence.complete else "evidence incomplete: " + "; ".join(evidence.missing)
        await self.end(TaskPhase.COMPLETED, reason)

    async def end(self, phase: TaskPhase, reason: str | None) -> None:
        """Enter a terminal phase. The sandbox is destroyed even when the task was cancelled."""
        bounded = patched(BOUNDED_PATCH)
        self.state.reason = bounds.cut(reason, bounds.EVENT_TEXT_CHARS) if bounded and reason else reason
        for item in self.state.batch:
            if item.result is None:
                item.result = ActionResult(
                    call_id=item.action.call_id,
                    tool=item.action.tool,
                    status=ActionStatus.NOT_RUN,
                    output="not run: task ended",
                )
        for request in self.approvals.pending():
            request.decided = True
        await self.release_sandbox()
        if self.state.admitted:
            await asyncio.shield(
                workflow.execute_local_activity_method(
                    TenantActivities.release,
                    ReleaseInput(task_id=self.task_id),
                    **options.local_config(options.ADMISSION, summary="release the tenant's place"),
                )
            )
            self.state.admitted = False
        if bounded:
            # The result carries the inline evidence: older records move out until it fits.
            await asyncio.shield(self.evidence_keeper.archive_older(at_end=True))
        self.set_phase(phase)
        self.emit(EventType.TASK_FINISHED, phase=phase.value, reason=self.state.reason)
        assert self.spec is not None
        metrics.workflow_counter(
            "agent_worker_tasks_finished", agent=self.spec.agent, tenant=self.spec.tenant, phase=phase.value
        )
        usage = self.state.usage
        for kind, seconds in (("active", usage.active_seconds), ("waiting", usage.waiting_seconds)):
            metrics.workflow_histogram(
                "agent_worker_task_seconds",
                seconds,
                agent=self.spec.agent,
                tenant=self.spec.tenant,
                phase=phase.value,
                kind=kind,
            )
        await self.deliver_events()

    async def release_sandbox(self) -> None:
        sandbox = self.state.sandbox
        if sandbox is None:
            return
        if self.lean and await asyncio.shield(self.destroy_here(sandbox)):
            self.state.sandbox = None
            self.emit(EventType.SANDBOX_DESTROYED, sandbox_id=sandbox.sandbox_id)
            return
        home = at_home(sandbox)
        try:
            # Shielded: a cancellation arriving now must not skip the cleanup.
            await asyncio.shield(
                self.placement.execute(
                    "sandbox",
                    SandboxActivities.destroy,
                    DestroySandboxInput(task_id=self.task_id, sandbox=sandbox),
                    options.SANDBOX_DESTROY,
                    summary=f"destroy sandbox {sandbox.sandbox_id}",
                    home=home,
                )
            )
        except ActivityError as err:
            if home is None or not home_unanswered(err):
                raise
            # Its host is gone (or has not come back in time): only that host's reaper can remove
            # it, which it does once it sees the task closed. The task ends as it would have.
            self.state.sandbox = None
            self.emit(
                EventType.SANDBOX_LEFT,
                sandbox_id=sandbox.sandbox_id,
                host=home.host,
                home_queue=home.queue,
                reason=f"its host did not take the destroy within {home.wait}; its reaper removes it",
            )
            return
        self.state.sandbox = None
        self.emit(EventType.SANDBOX_DESTROYED, sandbox_id=sandbox.sandbox_id)

    async def destroy_here(self, sandbox: SandboxRef) -> bool:
        """Destroy ``sandbox`` in a local activity, when this worker holds it (the usual case: the
        worker running the task also serves the sandbox role and made it). False when it does not, or
        could not: the destroy then goes to the sandbox's home as before."""
        try:
            await workflow.execute_local_activity_method(
                SandboxHere.destroy_here,
                DestroySandboxInput(task_id=self.task_id, sandbox=sandbox),
                **options.local_config(
                    options.SANDBOX_DESTROY_LOCAL, summary=f"destroy sandbox {sandbox.sandbox_id}"
                ),
            )
        except (ActivityError, ApplicationError) as err:  # a local activity's failure comes as itself
            if is_cancelled_exception(err):
                raise
            return False
        return True

    def result(self) -> TaskResult:
        """The task's result, with its evidence. One that would still be too large for Temporal
        (inline evidence is archived to fit at the end) keeps only what fits, and says what it left out."""
        evidence = evidence_of(self.state)
        result = TaskResult(
            task_id=self.task_id,
            phase=self.state.phase,
            final_output=self.state.final_output,
            reason=self.state.reason,
            evidence=evidence,
            usage=self.state.usage,
            evidence_complete=evidence.complete,
            conversation_ref=self.state.conversation_ref if self.threaded else None,
        )
        if patched(BOUNDED_PATCH):
            size = bounds.size_of(result)
            if size > bounds.MAX_PAYLOAD_BYTES:
                return bounds.slim_result(result, size)
        return result

    # ---- visibility ----------------------------------------------------------------------------

    def set_phase(self, phase: TaskPhase) -> None:
        if phase is self.state.phase:
            return
        previous = self.state.phase
        self.state.phase = phase
        self.account_time(previous)
        self.emit(EventType.PHASE_CHANGED, previous=previous.value, phase=phase.value)
        metrics.workflow_counter("agent_worker_phase_entered", phase=phase.value)
        self.publish()

    def account_time(self, ended: TaskPhase) -> None:
        """Add the time spent in the phase that just ``ended`` to the task's usage: waiting for a human,
        or working (a terminal phase adds nothing)."""
        now, since = workflow.now(), self.state.phase_since
        self.state.phase_since = now
        if since is None or ended.terminal:
            return
        spent = max((now - since).total_seconds(), 0.0)
        if ended is TaskPhase.AWAITING_APPROVAL:
            self.state.usage.waiting_seconds += spent
        else:
            self.state.usage.active_seconds += spent

    def publish(self) -> None:
        """Keep search attributes and the UI's current details in step with the state."""
        spec = self.spec
        pending = self.approvals.pending()
        approvers = sorted({p for r in pending for p in r.approvers})
        values: list[tuple[Any, Any]] = [
            (visibility.PHASE, self.state.phase.value),
            (visibility.TENANT, spec.tenant if spec else ""),
            (visibility.AGENT, spec.agent if spec else ""),
            (visibility.AWAITING_APPROVAL, self.state.phase is TaskPhase.AWAITING_APPROVAL),
            (visibility.APPROVERS, approvers),
            *([(visibility.THREAD, spec.thread)] if self.threaded and spec else []),
        ]
        if self.lean:
            # Only what changed (each upsert is an event in the history; most set one attribute).
            values = [(key, value) for key, value in values if self.published.get(key.name, ()) != value]
            self.published.update((key.name, value) for key, value in values)
        if values:
            workflow.upsert_search_attributes([key.value_set(value) for key, value in values])
        if self.state.phase is TaskPhase.AWAITING_APPROVAL and pending:
            lines = [f"**Waiting for approval** of {len(pending)} action(s):"]
            lines += [
                f"- `{r.request_id}` {r.action.tool} by {' or '.join(r.approvers)}, version `{r.version}`, "
                f"until {r.deadline.isoformat()}"
                for r in pending
            ]
            self.details("\n".join(lines))
        else:
            self.details(
                f"Phase: {self.state.phase.value}" + (f" ({self.state.reason})" if self.state.reason else "")
            )

    def details(self, text: str) -> None:
        workflow.set_current_details(text)

    def undelivered(self) -> int:
        return self.state.event_seq - self.state.delivered_seq if self.delivering else 0

    async def deliver_events(self) -> None:
        """Deliver the events the sink does not have yet, in order (``events.publish``), in parts of
        at most ``DELIVERY_BYTES``. Shielded, so the last events of a cancelled task are delivered too."""
        self.report_held_back()
        # What is ignored from now on goes into the next delivery, one by one again.
        self.state.ignored_window = 0
        if not self.undelivered():
            return
        events = [e for e in self.state.events if e.seq > self.state.delivered_seq]
        for part in self.delivery_parts(events):
            summary = f"deliver events {part[0].seq}-{part[-1].seq}"
            packing = patched(PACKED_EVENTS_PATCH)
            whole = PublishEventsInput(task_id=self.task_id, events=part)
            delivery = PublishEventsInput.pack(self.task_id, part) if packing else whole
            if self.local_delivery:
                history = workflow.info().get_current_history_length()
                delivery.basis = whole.basis = delivery_basis(self.run_index, history)
                if await asyncio.shield(self.deliver_here(delivery, len(part), summary)):
                    self.state.delivered_seq = part[-1].seq
                    continue
            result = await self.send_events(delivery, summary)
            if packing and result.delivered != len(part):
                # A worker from before packing read none of the packed events: send them whole.
                await self.send_events(whole, summary)
            self.state.delivered_seq = part[-1].seq
        self.trim_events()

    async def deliver_here(self, delivery: PublishEventsInput, count: int, summary: str) -> bool:
        """Deliver in this workflow task, as the local activity ``events.publish_here`` (patch
        ``local-delivery``): no activity and no workflow task of its own. The workflow task may still
        fail to commit, and its retry number its events otherwise; the delivery's ``basis`` lets the
        sink replace what it delivered then (``activities.events``). False when the worker's sink
        cannot replace, or did not answer in a few tries: the events then go as ``events.publish``."""
        try:
            result = await workflow.execute_local_activity_method(
                EventActivities.publish_here,
                delivery,
                **options.local_config(options.EVENTS_LOCAL, summary=summary),
            )
        except (ActivityError, ApplicationError) as err:  # a local activity's failure comes as itself
            if is_cancelled_exception(err):
                raise
            return False
        return result.delivered == count

    async def send_events(self, delivery: PublishEventsInput, summary: str) -> PublishEventsResult:
        """One ``events.publish``. Shielded, so the last events of a cancelled task are delivered too.

        An activity: committed in the history before it runs, so what it delivers is what the task
        recorded (``deliver_here`` first, since patch ``local-delivery``)."""
        sending = workflow.execute_activity_method(
            EventActivities.publish, delivery, **options.config(options.EVENTS, summary=summary)
        )
        return await asyncio.shield(sending)

    def delivery_parts(self, events: list[Event]) -> list[list[Event]]:
        """``events`` in order, split so no ``events.publish`` input passes ``DELIVERY_BYTES``."""
        if not patched(BOUNDED_PATCH):
            return [events]
        parts: list[list[Event]] = [[]]
        size = 0
        for event in events:
            event_size = bounds.size_of(event)
            if parts[-1] and size + event_size > DELIVERY_BYTES:
                parts.append([])
                size = 0
            parts[-1].append(event)
            size += event_size
        return parts

    def sink_due(self) -> bool:
        """Whether a waiting task should deliver its events now: ignored input has filled the bound
        of events recorded one by one, so they go to the sink while the wait goes on (and the ones
        that come in while it delivers are counted, then summed up)."""
        state = self.state  # (the window only counts once payloads are bounded: see emit_ignored)
        return state.ignored_window >= IGNORED_EVENTS_PER_DELIVERY or bool(state.ignored_unreported)

    def emit_ignored(self, type: EventType, **data: Any) -> None:
        """Record ignored input as an event, up to ``IGNORED_EVENTS_PER_DELIVERY`` between two
        deliveries; past that, count it by type, to be summed up at the next delivery. So a flood of
        bad signals does bounded work and keeps the state bounded until the sink has caught up."""
        state = self.state
        if patched(BOUNDED_PATCH):
            if state.ignored_window >= IGNORED_EVENTS_PER_DELIVERY:
                state.ignored_unreported[type.value] = state.ignored_unreported.get(type.value, 0) + 1
                return
            state.ignored_window += 1
        self.emit(type, **data)

    def report_held_back(self) -> None:
        """One event for each kind of ignored input held back since the last delivery."""
        held, self.state.ignored_unreported = self.state.ignored_unreported, {}
        for type, count in sorted(held.items()):
            self.emit(
                EventType(type),
                reason=f"{count} more ignored since the last delivery, past the "
                f"{IGNORED_EVENTS_PER_DELIVERY} recorded one by one; counted, not recorded",
                count=count,
            )

    def trim_events(self) -> None:
        """Keep the state's tail bounded, dropping only events already delivered."""
        events = self.state.events
        excess = len(events) - EVENT_TAIL
        if excess <= 0:
            return
        if self.delivering:
            # Events are in seq order, so the delivered ones are a prefix: count them without a scan
            # (this runs for every event; a scan made a flood of signals quadratic).
            excess = min(excess, max(self.state.delivered_seq - events[0].seq + 1, 0))
        del events[:excess]

    def emit(self, type: EventType, **data: Any) -> None:
        """Record an event in the state's bounded tail (and the replay-safe workflow log)."""
        self.state.event_seq += 1
        if patched(BOUNDED_PATCH):
            data = bounds.cut_values(data)
        chain = self.state.run_chain
        event = Event(
            event_id=event_id_for(self.task_id, chain, self.state.event_seq),
            run_chain=chain,
            task_id=self.task_id,
            seq=self.state.event_seq,
            type=type,
            at=workflow.now(),
            phase=self.state.phase.value,
            data=data,
        )
        self.state.events.append(event)
        self.trim_events()
        live_events.offer(event)  # a side channel, like the log: never on replay
        # At DEBUG: every event is in the event stream, the sink and ``status`` already; an INFO line
        # for each cost 5-10% of the worker's CPU per task (issue 21's profile).
        workflow.logger.debug("%s %s", type.value, data)


def _cause(err: BaseException) -> str:
    cause = err.__cause__
    return str(cause) if cause else "no detail"


__all__ = ["AgentTaskWorkflow"]
