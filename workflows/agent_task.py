"""``AgentTask``: one agent task's whole lifecycle.

The loop: run an agent turn; evaluate the policy on each proposed effectful action; publish approval
requests and wait (durably, until a deadline) for decisions; run the approved actions as their own
activities; feed the results into the next turn. The task completes only with evidence.

Decisions come as the signal ``submit_decision`` or the update ``decide`` (same checks; the update's
validator refuses bad ones before they reach history). Queries: ``status``, ``pending_approvals``.
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.tenants import TenantActivities
    from agent_worker.schemas.actions import ActionResult, ActionStatus
    from agent_worker.schemas.approvals import ApprovalRequest, DecisionKind, DecisionOutcome
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import (
        DEFAULT_EVENTS_BEFORE_WAIT,
        FIRST_RELEASE,
        Release,
        TaskInput,
        TaskPhase,
        TaskResult,
        TaskSpec,
        TaskState,
        TaskStatus,
    )
    from agent_worker.schemas.tenants import ReleaseInput
    from agent_worker.schemas.validation import (
        InvalidPayload,
        parse_decision,
        parse_follow_up,
        parse_task_input,
    )
    from agent_worker.telemetry import metrics

from agent_worker.workflows import bounds, fork, options
from agent_worker.workflows.approvals import ApprovalDesk
from agent_worker.workflows.batch import BatchRunner, batch_view
from agent_worker.workflows.budget_tree import BudgetKeeper, is_extension
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.decisions import expiry_problem, why_not
from agent_worker.workflows.effects import EffectRunner
from agent_worker.workflows.event_log import DELIVERY_BATCH, DELIVERY_BATCH_BEFORE, EventLog
from agent_worker.workflows.evidence import EvidenceKeeper, evidence_of
from agent_worker.workflows.grants import remember_problem
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.inputs import decode, follow_up_refused
from agent_worker.workflows.patches import (
    BOUNDED_PATCH,
    BUDGET_TREE_PATCH,
    CHECK_EDITS_PATCH,
    DELIVER_EVENTS_PATCH,
    FORK_PATCH,
    LEAN_EVIDENCE_PATCH,
    LOCAL_DELIVERY_PATCH,
    MINIMUM_ROUND_TRIPS_PATCH,
    RUN_CHAIN_PATCH,
    RUNNING_AT_ONCE_LINE,
    SETTLED_VISIBILITY_LINE,
    SHORT_WAIT_PATCH,
    THREADS_PATCH,
    ask_patches_at_start,
    on_line,
    patched,
)
from agent_worker.workflows.placement import Placement
from agent_worker.workflows.sla import ApprovalClock
from agent_worker.workflows.start import TaskStart
from agent_worker.workflows.turns import TurnRunner
from agent_worker.workflows.visibility import TaskVisibility

# What ``status`` shows of the prompt.
STATUS_PROMPT_CHARS = 500


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
        # The release line this run began on: ``workflows.patches.patched`` reads it here, so a run
        # begun on 0.2 takes every patch 0.2 folded without a marker, and one begun on 0.1 asks each.
        self.release: Release = (task.release if task else None) or FIRST_RELEASE
        if task is not None and task.state is None and patched(RUN_CHAIN_PATCH, release=self.release):
            # Decided once, at the chain's start, and carried by continue-as-new: a chain that began
            # before run chains keeps the task id alone (its sandbox, signatures, keys) to its end.
            self.state.run_chain = workflow.info().first_execution_run_id
        self.events = EventLog(self.task_id, self.state)
        self.visibility = TaskVisibility(
            self.spec, self.state, emit=self.events.emit, pending=lambda: self.approvals.pending()
        )
        # The helpers see the task through this narrow context, never the workflow itself.
        context = TaskContext(
            task_id=self.task_id,
            spec=self.spec,
            state=self.state,
            input_error=self.input_error,
            emit=self.events.emit,
            emit_ignored=self.events.emit_ignored,
            set_phase=self.visibility.set_phase,
            release=self.release,
        )
        self.context = context
        self.placement = Placement(context)
        self.approvals = ApprovalDesk(context)
        self.sla = ApprovalClock(context, publish=self.visibility.publish)
        self.budget = BudgetKeeper(context, approvals=self.approvals)
        self.effects = EffectRunner(
            context, approvals=self.approvals, placement=self.placement, budget=self.budget
        )
        self.batch_runner = BatchRunner(context, approvals=self.approvals, effects=self.effects)
        self.evidence_keeper = EvidenceKeeper(context)
        self.task_start = TaskStart(context, end=self.end)
        self.turns = TurnRunner(
            context,
            placement=self.placement,
            budget=self.budget,
            approvals=self.approvals,
            evidence_keeper=self.evidence_keeper,
            end=self.end,
            complete=self.complete,
        )
        # The minimum of round trips (``MINIMUM_ROUND_TRIPS_PATCH``; decided in ``run``).
        self.lean = False
        # On a thread, with the code that knows threads (decided in ``run``).
        self.threaded = False
        # A fork of another task (``workflows.fork``; decided in ``run``).
        self.forking = False

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
            self.visibility.publish()
            return self.result()
        # Tasks that started before event delivery existed keep running as they began.
        self.events.delivering = patched(DELIVER_EVENTS_PATCH)
        # Decided here, in the first workflow task, so every later check of it answers the same.
        self.lean = patched(MINIMUM_ROUND_TRIPS_PATCH)
        if self.lean:
            ask_patches_at_start()  # before any local activity (why: ``PATCHES_AT_START``)
        self.events.local_delivery = self.lean and patched(LOCAL_DELIVERY_PATCH)
        self.events.run_index = self.state.usage.runs
        self.budget.tree = patched(BUDGET_TREE_PATCH)
        self.threaded = spec.thread is not None and patched(THREADS_PATCH)
        # Asked in the first activation, and only by forks (``PATCHES_AT_START`` says why).
        self.forking = spec.fork is not None and patched(FORK_PATCH)
        self.visibility.lean, self.visibility.threaded = self.lean, self.threaded
        self.visibility.settled = on_line(SETTLED_VISIBILITY_LINE)
        self.visibility.running_at_once = on_line(RUNNING_AT_ONCE_LINE)
        if self.state.phase is TaskPhase.RECEIVED:
            self.state.started_at = workflow.now()
            self.events.emit(EventType.TASK_STARTED, agent=spec.agent, tenant=spec.tenant)
            metrics.workflow_counter("agent_worker_tasks_started", agent=spec.agent, tenant=spec.tenant)
        self.visibility.publish()
        try:
            if self.state.phase is TaskPhase.RECEIVED and not await self.task_start.admit():
                return self.result()
            if self.state.phase in (TaskPhase.RECEIVED, TaskPhase.INITIALIZING):
                await self.initialize()
            while not self.state.phase.terminal:
                batch = DELIVERY_BATCH if patched(LEAN_EVIDENCE_PATCH) else DELIVERY_BATCH_BEFORE
                if self.events.undelivered() >= batch:
                    await self.events.deliver_events()
                await self.maybe_continue_as_new()
                if self.state.batch:
                    await self.settle_batch()
                else:
                    await self.turns.next_turn()
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

    async def initialize(self) -> None:
        assert self.spec is not None
        self.visibility.set_phase(TaskPhase.INITIALIZING)
        self.state.inputs = await self.task_start.ingest(self.lean)
        if self.threaded and self.state.turn == 0 and not await self.task_start.resume_thread():
            return
        if self.forking and self.state.fork is None:
            await fork.begin(self.context, self.effects.sandbox)
        self.visibility.set_phase(TaskPhase.RUNNING)

    def continue_as_new_due(self) -> bool:
        """Whether Temporal suggests continuing as new, or the task's own event limit is reached."""
        info = workflow.info()
        limit = self.spec.continue_as_new_after_events if self.spec else None
        return info.is_continue_as_new_suggested() or (
            limit is not None and info.get_current_history_length() >= limit
        )

    def continue_before_wait_due(self) -> bool:
        """Whether the task, about to begin a wait for a person, has a run at least
        ``continue_as_new_before_wait`` events long: it then continues as new first, so a replay
        after the worker's cache let it go reads only the short run its wait began in. Unset, the
        limit is ``DEFAULT_EVENTS_BEFORE_WAIT`` in a run with ``SHORT_WAIT_PATCH`` (a lean run asks
        it at its start), else none; 0 is none. Asked once per wait, as it begins: input arriving
        during the wait never makes it continue again."""
        limit = self.spec.continue_as_new_before_wait if self.spec else None
        if limit is None and self.lean and patched(SHORT_WAIT_PATCH):  # asked at the start of a lean run
            limit = DEFAULT_EVENTS_BEFORE_WAIT
        return (
            bool(limit)
            and self.state.phase is TaskPhase.AWAITING_APPROVAL
            and workflow.info().get_current_history_length() >= limit
            and bool(self.approvals.pending())
        )

    async def maybe_continue_as_new(self) -> None:
        if self.continue_as_new_due():
            await self.continue_as_new()

    async def continue_as_new(self) -> NoReturn:
        """Continue as new, carrying the whole state (once running handlers have finished)."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self.evidence_keeper.archive_older()
        self.evidence_keeper.check_carriable()  # or hand off, explained
        self.events.emit(
            EventType.CONTINUED_AS_NEW, history_length=workflow.info().get_current_history_length()
        )
        self.state.usage.runs += 1
        await self.events.deliver_events()
        workflow.continue_as_new(
            TaskInput(spec=self.spec, state=self.state, release=self.context.input_release)
        )

    # ---- turns ---------------------------------------------------------------------------------

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
        beginning = True
        while self.approvals.pending():
            self.visibility.set_phase(TaskPhase.AWAITING_APPROVAL)
            if beginning and self.continue_before_wait_due():
                await self.continue_as_new()  # the wait begins in a short run, its events delivered
            beginning = False
            await self.events.deliver_events()  # a waiting task's events are all in the sink
            if not self.approvals.pending():
                break  # decided while the events were being delivered
            pending = self.approvals.pending()
            timed = self.sla.governs(pending)  # reminders, escalations, the rule's expiry
            first_deadline = self.sla.next_moment(pending) if timed else min(r.deadline for r in pending)
            remaining = (first_deadline - workflow.now()).total_seconds()
            try:
                await workflow.wait_condition(
                    lambda: (
                        not self.approvals.pending() or self.continue_as_new_due() or self.events.sink_due()
                    ),
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
            self.events.emit(EventType.APPROVAL_EXPIRED, request_ids=expired)
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
            self.events.emit_ignored(EventType.INPUT_IGNORED, reason=f"the task is {self.state.phase.value}")
            return
        try:
            follow_up = parse_follow_up(decode(raw))
        except InvalidPayload as err:
            self.events.emit_ignored(EventType.INPUT_IGNORED, reason=str(err))
            return
        refused = follow_up_refused(self.state.follow_ups, follow_up)
        if refused is not None:
            self.events.emit_ignored(EventType.INPUT_IGNORED, reason=refused, principal=follow_up.principal)
            return
        self.state.follow_ups.append(follow_up)
        self.events.emit(EventType.INPUT_ADDED, principal=follow_up.principal, chars=len(follow_up.text))

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
            detail=reason or self.approvals.recorded(decision),
        )

    @decide.validator
    def validate_decide(self, raw: RawValue) -> None:
        """Refuse a bad decision before it reaches history."""
        if self.input_error:
            raise ValueError(self.input_error)
        decision = parse_decision(decode(raw))
        assert self.spec is not None
        reason = (
            expiry_problem(decision, workflow.now())
            or why_not(
                self.state.requests,
                decision,
                self.task_id,
                self.spec.policy,
                self.state.run_chain,
                starter=self.spec.started_by,
            )
            or remember_problem(self.context, decision)
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
            forked_from=self.state.fork.origin() if self.state.fork else None,
            # What a client needs to sign a decision, so that deciding reads nothing but this.
            require_signatures=spec.policy.require_signatures if spec else False,
            signers=sorted(spec.policy.signers) if spec else [],
        )

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[ApprovalRequest]:
        """Requests still waiting for a decision."""
        return self.approvals.pending()

    # ---- ending --------------------------------------------------------------------------------

    async def complete(self) -> None:
        """Confirm every write by lookup, release the sandbox, and complete."""
        await self.effects.writes.confirm_writes()
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
        await self.effects.sandbox.release_sandbox(self.lean)
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
        self.visibility.set_phase(phase)
        self.events.emit(EventType.TASK_FINISHED, phase=phase.value, reason=self.state.reason)
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
        await self.events.deliver_events()

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


def _cause(err: BaseException) -> str:
    cause = err.__cause__
    return str(cause) if cause else "no detail"


__all__ = ["AgentTaskWorkflow"]
