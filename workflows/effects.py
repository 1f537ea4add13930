"""Running decided actions from the workflow: sandbox commands and business writes, each its own
activity, each recorded as evidence. Workflow code: deterministic, no I/O of its own."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import ActivityConfig, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities.agent.turn import AgentActivities
    from activities.business import BusinessActivities
    from activities.sandbox.activities import SandboxActivities, SandboxHere
    from activities.stores import live_events
    from schemas.actions import (
        ActionResult,
        ActionStatus,
        BudgetRaise,
        BusinessWrite,
        Delegation,
        FunctionCall,
        McpCall,
        ProposedAction,
        SandboxCommand,
        action_version,
    )
    from schemas.approvals import ApprovalDecision, DecisionKind
    from schemas.artifacts import InputFile
    from schemas.authz import AuthzRequest
    from schemas.events import EventType
    from schemas.sandbox import CommandRecord, CreateSandboxInput, ExecInput, PlaceSandboxInput, SandboxRef
    from schemas.streams import StreamEntry
    from schemas.tasks import (
        BatchItem,
        DelegationRecord,
        PolicyVerdict,
        TaskInput,
        TaskPhase,
        TaskResult,
        TaskSpec,
    )
    from schemas.turns import PlanInput, PlanResult
    from schemas.writes import (
        LookupInput,
        WriteEvidence,
        WriteInput,
        WriteOutcome,
        WriteReceipt,
        operation_key,
    )
    from telemetry import metrics

from workflows import bounds, options
from workflows.approvals import ApprovalDesk
from workflows.bounds import cut
from workflows.budget_tree import BudgetKeeper, child_usage
from workflows.context import TaskContext
from workflows.decisions import find_request
from workflows.failures import (
    as_activity_error,
    failure_code,
    failure_detail,
    failure_details,
    failure_message,
    failure_operation,
)
from workflows.handoff import HandOff
from workflows.patches import (
    BOUNDED_PATCH,
    CHECK_EDITS_PATCH,
    EXEC_HERE_PATCH,
    MINIMUM_ROUND_TRIPS_PATCH,
    REBUILD_SANDBOX_PATCH,
    SANDBOX_HOME_PATCH,
    SETTLE_CANCELLED_WRITE_PATCH,
    patched,
)
from workflows.placement import Home, Placement, at_home, home_of, home_unanswered
from workflows.takeover import record_takeover
from workflows.tool_effects import ToolEffects


class _Revoked(Exception):
    """The write refused to run: its approver no longer holds the permission (``authz_revoked``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _CancelledWrite(Exception):
    """The task was cancelled while a write was in flight; ``receipt`` is what the write returned
    once it settled (None: it failed, so only a lookup can tell)."""

    def __init__(self, receipt: WriteReceipt | None) -> None:
        super().__init__("cancelled during a business write")
        self.receipt = receipt


# The error type of a local activity refused by a worker that does not hold the task's sandbox.
ELSEWHERE = "sandbox_elsewhere"
# Characters of a command's stdout and stderr in the result preview when the full result is kept by
# reference.
PREVIEW_CHARS = 4_000


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
        # Commands of one batch run concurrently: the first creates the sandbox, the others wait for it.
        self.sandbox_lock = asyncio.Lock()

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
            output, output_ref = await self.exec(action, operation)
        elif isinstance(operation, Delegation):
            output, ok = await self.delegate(action, operation)
            if not ok:
                status = ActionStatus.FAILED
        elif isinstance(operation, FunctionCall | McpCall):
            called = await self.tools.run(action, operation)
            output, output_ref = called.output, called.output_ref
            if called.is_error:
                status = ActionStatus.FAILED
        else:
            authz = self.approvals.write_authz(item)
            try:
                output = await self.write(action, operation, authz)
            except _Revoked as revoked:
                # Nothing was written: the action did not run, and waits for a decision again.
                state.usage.actions -= 1
                self.task.set_phase(TaskPhase.RUNNING)
                self.approvals.authorization(item, False, revoked.reason)
                return None
            if authz is not None:
                self.approvals.authorization(item, True, "checked by business.write before it wrote")
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

    # ---- sandbox -------------------------------------------------------------------------------

    def runs_command(self, item: BatchItem) -> bool:
        """Whether ``item`` will run a sandbox command once decided (allowed, or approved)."""
        if not isinstance(item.action.operation, SandboxCommand) or item.verdict is PolicyVerdict.DENY:
            return False
        record = self.approvals.decision_for(item)
        return item.verdict is PolicyVerdict.ALLOW or (
            record is not None and record.decision is not DecisionKind.REJECT
        )

    async def ensure_sandbox(self) -> SandboxRef:
        async with self.sandbox_lock:
            return await self.create_sandbox()

    async def create_sandbox(self) -> SandboxRef:
        state, spec = self.task.state, self.task.valid_spec
        if state.sandbox is None:
            create = self.create_input()
            summary = f"create the task's sandbox (backend {spec.sandbox.backend.value})"
            if patched(SANDBOX_HOME_PATCH):
                state.sandbox = await self.create_at_home(create, summary)
            else:
                state.sandbox = await self.placement.execute(
                    "sandbox", SandboxActivities.create, create, options.SANDBOX_CREATE, summary=summary
                )
            self.created(state.sandbox)
        return state.sandbox

    async def create_at_home(self, create: CreateSandboxInput, summary: str) -> SandboxRef:
        """Ask a sandbox worker which host would hold the sandbox (``sandbox.place``), then create it
        on that host's home queue. A create retried after its host died waits for that host (which
        finds what it began), rather than making a second sandbox elsewhere and leaving the first
        behind; a host that does not take it within its wait is given up, for another one."""
        for tries in range(1, options.SANDBOX_PLACE_TRIES + 1):
            placed = await self.placement.execute(
                "sandbox",
                SandboxActivities.place,
                PlaceSandboxInput(task_id=create.task_id, spec=create.spec),
                options.SANDBOX_PLACE,
                summary="choose the sandbox's host",
            )
            home = home_of(placed.home_queue, placed.home_wait_seconds)
            try:
                return await self.placement.execute(
                    "sandbox",
                    SandboxActivities.create,
                    create,
                    options.SANDBOX_CREATE,
                    summary=summary,
                    home=home,
                )
            except ActivityError as err:
                if home is None or not home_unanswered(err) or tries == options.SANDBOX_PLACE_TRIES:
                    raise
                self.task.emit(
                    EventType.DISPATCH_MOVED,
                    role="sandbox",
                    reason=f"host {home.host} did not take the sandbox's create within {home.wait}; "
                    "another host is chosen (what it began there is left to its reaper)",
                )
        raise AssertionError("unreachable")

    def exec_input(
        self, action: ProposedAction, command: SandboxCommand, sandbox: SandboxRef | None
    ) -> ExecInput:
        return ExecInput(
            task_id=self.task.task_id,
            call_id=action.call_id,
            sandbox=sandbox,
            spec=self.task.valid_spec.sandbox,
            command=command,
            create=self.create_input() if sandbox is None else None,
        )

    def create_input(self) -> CreateSandboxInput:
        state, spec = self.task.state, self.task.valid_spec
        return CreateSandboxInput(
            task_id=self.task.task_id,
            tenant=spec.tenant,
            spec=spec.sandbox,
            inputs=state.inputs,
            run_id=workflow.info().run_id,
            run_chain=state.run_chain,
        )

    async def exec_creating(
        self, action: ProposedAction, command: SandboxCommand, *, seconds: float
    ) -> CommandRecord:
        """The task's first command, which creates the sandbox on the worker that takes it
        (``ExecInput.create``): one activity where place, create and exec were three. Commands that
        come meanwhile wait for the sandbox it makes (``sandbox_lock``)."""
        async with self.sandbox_lock:
            state = self.task.state
            summary = (
                f"{action.tool} ({action.call_id}) in a new sandbox "
                f"(backend {self.task.valid_spec.sandbox.backend.value})"
            )
            start_to_close = timedelta(seconds=seconds) + options.SANDBOX_CREATE_GRACE + options.EXEC_GRACE
            exec_input = self.exec_input(action, command, None)
            try:
                record = await self.exec_first(exec_input, summary, start_to_close)
            except ActivityError as err:
                if failure_code(err) != "sandbox_begun_elsewhere":
                    raise
                record = await self.exec_where_begun(err, exec_input, summary, start_to_close)
            sandbox, record.sandbox = record.sandbox, None
            if sandbox is None:  # an older worker took it and ran it in a sandbox it had
                raise AssertionError("sandbox.exec with a create returned no sandbox")
            state.sandbox = sandbox
            self.created(sandbox)
            return record

    async def exec_where_begun(
        self, err: ActivityError, exec_input: ExecInput, summary: str, start_to_close: timedelta
    ) -> CommandRecord:
        """The first command's attempt that was lost had begun the sandbox on another host: run the
        command there (that host finds what it began), so no second sandbox is made and the first left
        behind. A host that does not take it within its wait has lost it (its reaper removes it): the
        command then makes the sandbox wherever it runs."""
        queue = failure_detail(err, "home_queue")
        wait = failure_detail(err, "home_wait_seconds")
        home = home_of(queue, float(wait) if wait else None)
        try:
            return await self.exec_first(
                exec_input, f"{summary} (on {queue}, where it was begun)", start_to_close, home=home
            )
        except ActivityError as lost:
            if home is None or not home_unanswered(lost):
                raise
            self.task.emit(
                EventType.SANDBOX_LEFT,
                home_queue=queue,
                reason=f"its host did not take the command within {home.wait}; its reaper removes it",
            )
            return await self.exec_first(exec_input, summary, start_to_close)

    async def exec_first(
        self, exec_input: ExecInput, summary: str, start_to_close: timedelta, home: Home | None = None
    ) -> CommandRecord:
        """One ``sandbox.exec`` of the first command (its input carries the create), at ``home`` or
        wherever a sandbox worker takes it."""
        return await self.placement.execute(
            "sandbox",
            SandboxActivities.exec,
            exec_input,
            options.SANDBOX_EXEC,
            summary=summary,
            start_to_close=start_to_close,
            home=home,
        )

    async def exec_here(
        self, exec_input: ExecInput, home: Home | None, summary: str, start_to_close: timedelta
    ) -> CommandRecord | None:
        """Run the command as the local activity ``sandbox.exec_here`` when the worker running the
        task likely holds its host-local sandbox (patch ``sandbox-exec-here``): the task runs sandbox
        work on its task queue, that home has not refused before, and the command is short enough to
        hold a workflow task for. None when it does not run here: not asked, or refused
        (``sandbox_elsewhere``, and that home's later commands go there at once).

        Raises:
            ActivityError: as ``sandbox.exec`` fails, but for the refusal.
        """
        state = self.task.state
        if (
            home is None
            or "sandbox" not in state.colocated
            or home.queue == state.refused_here
            or start_to_close > options.LOCAL_COMMAND_LIMIT + options.EXEC_GRACE
            or not patched(EXEC_HERE_PATCH)
        ):
            return None
        try:
            return await workflow.execute_local_activity_method(
                SandboxHere.exec_here,
                exec_input,
                **options.local_config(
                    options.SANDBOX_EXEC_LOCAL, summary=summary, start_to_close=start_to_close
                ),
            )
        except ActivityError as err:
            if failure_code(err) != ELSEWHERE:
                raise
        except ApplicationError as err:  # a local activity's failure may come as itself
            if err.type != ELSEWHERE:
                raise as_activity_error(err, "sandbox.exec_here") from err
        state.refused_here = home.queue
        return None

    def created(self, sandbox: SandboxRef) -> None:
        self.task.emit(
            EventType.SANDBOX_CREATED,
            sandbox_id=sandbox.sandbox_id,
            backend=sandbox.backend.value,
            isolation=sandbox.isolation,
            trusted_only=sandbox.trusted_only,
        )

    def sandbox_lost(self, sandbox: SandboxRef, error: str) -> None:
        """The sandbox vanished (removed from outside, its host died): forget it, so the next command
        gets a new one built from the task's inputs, and record that the work done in it is gone."""
        self.forget_sandbox(sandbox.sandbox_id, error)

    def forget_sandbox(self, sandbox_id: str, error: str) -> None:
        state = self.task.state
        lost_after = [c.call_id for c in state.commands if c.sandbox_id == sandbox_id]
        state.sandbox = None
        state.lost_sandboxes.append(
            f"sandbox {sandbox_id} was lost after {len(lost_after)} command(s) "
            f"({', '.join(lost_after) or 'none'}): files they made there are gone"
        )
        self.task.emit(EventType.SANDBOX_LOST, sandbox_id=sandbox_id, commands=lost_after, error=error)

    async def exec(self, action: ProposedAction, command: SandboxCommand) -> tuple[str, str | None]:
        """Run the command; returns the model-visible result (a preview) and its full version's digest."""
        state, spec = self.task.state, self.task.valid_spec
        if state.usage.sandbox_seconds >= spec.budgets.max_sandbox_seconds:
            self.task.emit(
                EventType.BUDGET_EXHAUSTED,
                budget="max_sandbox_seconds",
                limit=spec.budgets.max_sandbox_seconds,
            )
            raise HandOff(f"sandbox time budget exhausted ({spec.budgets.max_sandbox_seconds:g} s)")
        timeout = command.timeout_seconds or spec.sandbox.command_timeout_seconds
        rebuilt = False
        while True:
            if state.sandbox is None and patched(MINIMUM_ROUND_TRIPS_PATCH):
                try:
                    record = await self.exec_creating(action, command, seconds=timeout)
                    break
                except ActivityError as err:
                    # A create that failed fails the task, as it did when it was an activity of its own.
                    if is_cancelled_exception(err) or failure_operation(err) == "sandbox.create":
                        raise
                    lost = failure_detail(err, "sandbox_id")
                    if failure_code(err) == "sandbox_missing" and lost and not rebuilt:
                        # The sandbox made for this command vanished under it: as for a known one.
                        self.forget_sandbox(lost, failure_message(err))
                        rebuilt = True
                        continue
                    self.task.emit(EventType.SANDBOX_EXEC, call_id=action.call_id, error=failure_message(err))
                    return json.dumps({"error": failure_message(err)}), None
            sandbox = await self.ensure_sandbox()
            home = at_home(sandbox)
            summary = f"{action.tool} ({action.call_id})"  # the record names the sandbox
            start_to_close = timedelta(seconds=timeout) + options.EXEC_GRACE
            exec_input = self.exec_input(action, command, sandbox)
            try:
                here = await self.exec_here(exec_input, home, summary, start_to_close)
                record = here or await self.placement.execute(
                    "sandbox",
                    SandboxActivities.exec,
                    exec_input,
                    options.SANDBOX_EXEC,
                    summary=summary,
                    start_to_close=start_to_close,
                    home=home,
                )
                break
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                error = failure_message(err)
                gone = home is not None and home_unanswered(err)
                if gone:
                    assert home is not None
                    error = f"its host {home.host} did not take the command within {home.wait}: {error}"
                if (
                    (gone or failure_code(err) == "sandbox_missing")
                    and not rebuilt
                    and patched(REBUILD_SANDBOX_PATCH)
                ):
                    self.sandbox_lost(sandbox, error)
                    rebuilt = True
                    continue  # rebuilt from the task's inputs; run the command again
                self.task.emit(EventType.SANDBOX_EXEC, call_id=action.call_id, error=error)
                return json.dumps({"error": error}), None
        state.commands.append(record)
        state.artifacts.extend(a for a in record.outputs if a not in state.artifacts)
        state.usage.sandbox_seconds += record.duration_ms / 1000
        record_takeover(self.task, "command", record.takeover_seconds, call_id=action.call_id)
        self.task.emit(
            EventType.SANDBOX_EXEC,
            call_id=action.call_id,
            exit_code=record.exit_code,
            timed_out=record.timed_out,
            duration_ms=record.duration_ms,
            stdout_digest=record.stdout_artifact.digest,
        )
        self.stream_output(action, record)
        stdout, stderr = record.stdout, record.stderr
        if record.tool_output is not None and patched(BOUNDED_PATCH):
            # The model reads the full result by reference; the preview only travels in the next
            # turn's input, which must stay small however much a command printed.
            stdout, stderr = cut(stdout, PREVIEW_CHARS), cut(stderr, PREVIEW_CHARS)
        preview = {
            "exit_code": record.exit_code,
            "timed_out": record.timed_out,
            "stdout": stdout,
            "stderr": stderr,
            "truncated": record.truncated,
            "outputs": [o.model_dump(mode="json") for o in record.outputs],
        }
        return json.dumps(preview, sort_keys=True), record.tool_output.digest if record.tool_output else None

    def stream_output(self, action: ProposedAction, record: CommandRecord) -> None:
        """The command's output preview to the live stream, as it finishes (a side channel like
        the log, never on replay: ``activities.stores.live_events``)."""
        entry = StreamEntry(
            task_id=self.task.task_id,
            run_chain=self.task.state.run_chain,
            turn=self.task.state.turn,
            kind="tool_result",
            data={
                "name": action.tool,
                "call_id": action.call_id,
                "exit_code": record.exit_code,
                "output": cut(record.stdout, PREVIEW_CHARS),
                "stderr": cut(record.stderr, PREVIEW_CHARS),
                "chars": len(record.stdout),
            },
        )
        live_events.offer(entry)

    # ---- sub-tasks -----------------------------------------------------------------------------

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
            bounds.check(f"sub-task {child_id}'s input", TaskInput(spec=child))
        try:
            result = await workflow.execute_child_workflow(
                "AgentTask",
                TaskInput(spec=child),
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

    # ---- business writes -----------------------------------------------------------------------

    async def write(
        self, action: ProposedAction, plan: BusinessWrite, authz: AuthzRequest | None = None
    ) -> str | None:
        """Write once under the action's operation key. An unknown outcome is looked up before
        anything else: found, it is recorded; not found, the write is sent again under the same key.
        A conflict, a system that stays down, or a lookup that stays unavailable hands the task off.
        Returns the model-visible receipt, or None when nothing was written."""
        spec = self.task.valid_spec
        # Keyed by the run chain too: a reused task id is a new task, whose writes are its own.
        key = operation_key(self.task.task_id, action.call_id, self.task.state.run_chain)
        write_input = WriteInput(
            operation_key=key,
            task_id=self.task.task_id,
            tenant=spec.tenant,
            record_type=plan.record_type,
            payload=plan.payload,
            system=plan.system,
            authz=authz,
        )
        if patched(BOUNDED_PATCH):
            bounds.check(f"write {key}'s input", write_input)
        self.task.set_phase(TaskPhase.COMMITTING)
        settle = patched(SETTLE_CANCELLED_WRITE_PATCH)
        try:
            receipt, by_lookup = await self.write_rounds(action, key, write_input, settle)
        except _CancelledWrite as cancelled:
            await self.settle_cancelled(action, key, cancelled.receipt, plan.system)
            raise asyncio.CancelledError from None
        except (asyncio.CancelledError, ActivityError) as err:
            by_cancel = isinstance(err, asyncio.CancelledError) or is_cancelled_exception(err)
            if not settle or not by_cancel or workflow.cancellation_reason() is None:
                raise
            await self.settle_cancelled(action, key, None, plan.system)  # cancelled during a lookup
            raise
        self.task.set_phase(TaskPhase.RUNNING)
        return self.record_write(action, key, receipt, system=plan.system, by_lookup=by_lookup)

    async def write_rounds(
        self, action: ProposedAction, key: str, write_input: WriteInput, settle: bool
    ) -> tuple[WriteReceipt, bool]:
        """Write, and look up after an unknown outcome, until the write settles (or hand off). The
        receipt, and whether a lookup gave it.

        Raises:
            _Revoked: the write checked its approval (``WriteInput.authz``) and found it revoked.
        """
        receipt: WriteReceipt | None = None
        by_lookup = False
        for round_ in range(1, options.MAX_WRITE_ROUNDS + 1):
            self.task.emit(EventType.WRITE_ATTEMPTED, call_id=action.call_id, operation_key=key, round=round_)
            try:
                receipt = await self.send_write(write_input, settle)
                break
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                code, message = failure_code(err), failure_message(err)
            if code == "authz_revoked":
                raise _Revoked(message)
            if code == "write_conflict":
                self.task.emit(EventType.WRITE_CONFLICT, operation_key=key, error=message)
                metrics.workflow_counter("agent_worker_writes", outcome="conflict")
                raise HandOff(f"write {key} conflicts with what the business system holds: {message}")
            if code != "write_unknown":
                raise HandOff(f"write {key} did not happen, the business system is unavailable: {message}")
            self.task.emit(EventType.WRITE_UNKNOWN, operation_key=key, error=message)
            metrics.workflow_counter("agent_worker_writes", outcome="unknown")
            self.task.set_phase(TaskPhase.RECONCILING)
            found = await self.lookup(key, system=write_input.system)
            if found is None:
                raise HandOff(f"write {key}: outcome unknown and the lookup stayed unavailable")
            if found.outcome is WriteOutcome.COMMITTED:
                receipt, by_lookup = found, True
                break
            self.task.set_phase(TaskPhase.COMMITTING)  # not found: send it again, same key
        if receipt is None:
            raise HandOff(f"write {key} did not settle after {options.MAX_WRITE_ROUNDS} rounds")
        return receipt, by_lookup

    async def send_write(self, write_input: WriteInput, settle: bool) -> WriteReceipt:
        """One ``business.write``. With ``settle``, a cancellation of the task does not abandon the
        write in flight (it may commit all the same): the write is let finish (its retries bound the
        wait) and ``_CancelledWrite`` carries what it returned."""
        kwargs = options.config(
            options.BUSINESS_WRITE,
            summary=f"write {write_input.record_type} {write_input.operation_key}",
            task_queue=options.business_queue(),
        )
        if not settle:
            return await workflow.execute_activity_method(BusinessActivities.write, write_input, **kwargs)
        sending = workflow.start_activity_method(BusinessActivities.write, write_input, **kwargs)
        try:
            return await asyncio.shield(sending)
        except asyncio.CancelledError:
            if workflow.cancellation_reason() is None:
                raise  # evicted from the worker's cache, not cancelled: the next replay goes on
            try:
                receipt: WriteReceipt | None = await asyncio.shield(sending)
            except ActivityError:
                receipt = None
            raise _CancelledWrite(receipt) from None

    async def settle_cancelled(
        self, action: ProposedAction, key: str, receipt: WriteReceipt | None, system: str | None
    ) -> None:
        """The task is being cancelled during the write: whatever committed under ``key`` goes into
        the events and the evidence all the same (looked up when the write's own answer is lost)."""
        by_lookup = receipt is None or receipt.outcome is WriteOutcome.UNKNOWN
        if by_lookup:
            receipt = await asyncio.shield(self.lookup(key, options.CONFIRM_LOOKUP, system=system))
        if receipt is not None and receipt.outcome is not WriteOutcome.UNKNOWN:
            self.record_write(action, key, receipt, during_cancel=True, system=system, by_lookup=by_lookup)

    def record_write(
        self,
        action: ProposedAction,
        key: str,
        receipt: WriteReceipt,
        during_cancel: bool = False,
        system: str | None = None,
        by_lookup: bool = False,
    ) -> str:
        """Record a settled write as evidence and an event; returns the model-visible receipt. Since
        the minimum of round trips a committed receipt confirms the write (``confirmed_by``: the
        write's own, or the lookup's that found it), so completion looks up only what is unknown."""
        extra = {"during_cancel": True} if during_cancel else {}
        metrics.workflow_counter("agent_worker_writes", outcome=receipt.outcome.value)
        if receipt.outcome is WriteOutcome.REJECTED:
            self.task.emit(EventType.WRITE_REJECTED, operation_key=key, detail=receipt.detail, **extra)
            return json.dumps(
                {"outcome": "rejected", "operation_key": key, "detail": receipt.detail}, sort_keys=True
            )
        evidence = WriteEvidence(call_id=action.call_id, operation_key=key, receipt=receipt, system=system)
        if (
            receipt.outcome is WriteOutcome.COMMITTED
            and receipt.payload_digest is not None
            and patched(MINIMUM_ROUND_TRIPS_PATCH)
        ):
            evidence.confirmed, evidence.confirmed_by = True, "lookup" if by_lookup else "write"
        self.task.state.writes.append(evidence)
        self.task.emit(
            EventType.WRITE_CONFIRMED,
            operation_key=key,
            outcome=receipt.outcome.value,
            record_id=receipt.record_id,
            replayed=receipt.replayed,
            **extra,
        )
        return json.dumps(
            {"outcome": receipt.outcome.value, "record_id": receipt.record_id, "operation_key": key},
            sort_keys=True,
        )

    async def lookup(
        self, key: str, patience: ActivityConfig = options.BUSINESS_LOOKUP, *, system: str | None = None
    ) -> WriteReceipt | None:
        """The committed receipt under ``key``; an UNKNOWN-outcome receipt when nothing is there;
        None when the lookup itself stayed unavailable."""
        try:
            result = await workflow.execute_activity_method(
                BusinessActivities.lookup,
                LookupInput(operation_key=key, system=system),
                **options.config(
                    patience, summary=f"{patience.get('summary')}: {key}", task_queue=options.business_queue()
                ),
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            return None
        self.task.emit(EventType.WRITE_RECONCILED, operation_key=key, found=result.found)
        metrics.workflow_counter("agent_worker_reconciliations", found=result.found)
        if result.receipt is None:
            return WriteReceipt(operation_key=key, outcome=WriteOutcome.UNKNOWN, detail="not found by lookup")
        return result.receipt

    async def confirm_writes(self) -> None:
        """Look every write up again before completing: evidence, not the write's own word."""
        writes = [w for w in self.task.state.writes if w.confirmed is None]
        if not writes:
            return
        self.task.set_phase(TaskPhase.RECONCILING)
        for evidence in writes:
            found = await self.lookup(evidence.operation_key, options.CONFIRM_LOOKUP, system=evidence.system)
            if found is not None:
                evidence.confirmed = (
                    found.outcome is WriteOutcome.COMMITTED
                    and found.payload_digest == evidence.receipt.payload_digest
                )
                if patched(MINIMUM_ROUND_TRIPS_PATCH):
                    evidence.confirmed_by = "lookup"


def _result(action: ProposedAction, status: ActionStatus, output: str) -> ActionResult:
    return ActionResult(call_id=action.call_id, tool=action.tool, status=status, output=output)
