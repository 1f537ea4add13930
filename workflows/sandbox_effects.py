"""Running sandbox commands from the workflow: the task's sandbox created (at its host's home, or by
its first command), each command run as ``sandbox.exec`` (or ``sandbox.exec_here`` on the worker that
holds the sandbox), a lost sandbox rebuilt once, each command recorded as evidence. Workflow code:
deterministic, no I/O of its own."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.sandbox.activities import SandboxActivities, SandboxHere
    from agent_worker.activities.stores import live_events
    from agent_worker.schemas.actions import ProposedAction, SandboxCommand
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.sandbox import (
        CommandRecord,
        CreateSandboxInput,
        DestroySandboxInput,
        ExecInput,
        PlaceSandboxInput,
        SandboxRef,
    )
    from agent_worker.schemas.streams import StreamEntry

from agent_worker.workflows import options
from agent_worker.workflows.bounds import cut
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.failures import (
    as_activity_error,
    failure_code,
    failure_detail,
    failure_message,
    failure_operation,
)
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.patches import (
    BOUNDED_PATCH,
    EXEC_HERE_PATCH,
    MINIMUM_ROUND_TRIPS_PATCH,
    REBUILD_SANDBOX_PATCH,
    SANDBOX_HOME_PATCH,
    patched,
)
from agent_worker.workflows.placement import Home, Placement, at_home, home_of, home_unanswered
from agent_worker.workflows.takeover import record_takeover

# The error type of a local activity refused by a worker that does not hold the task's sandbox.
ELSEWHERE = "sandbox_elsewhere"
# Characters of a command's stdout and stderr in the result preview when the full result is kept by
# reference.
PREVIEW_CHARS = 4_000


class SandboxEffects:
    """Runs one task's sandbox commands, in the sandbox it creates once (and again when it is lost),
    and records them as evidence. Sandbox activities run where the task's ``placement`` says."""

    def __init__(self, task: TaskContext, *, placement: Placement) -> None:
        self.task = task
        self.placement = placement
        # Commands of one batch run concurrently: the first creates the sandbox, the others wait for it.
        self.sandbox_lock = asyncio.Lock()

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

    async def release_sandbox(self, lean: bool) -> None:
        """Destroy the task's sandbox at its end (here first, when ``lean``: the minimum of round
        trips), or record that its host's reaper removes it."""
        sandbox = self.task.state.sandbox
        if sandbox is None:
            return
        if lean and await asyncio.shield(self.destroy_here(sandbox)):
            self.task.state.sandbox = None
            self.task.emit(EventType.SANDBOX_DESTROYED, sandbox_id=sandbox.sandbox_id)
            return
        home = at_home(sandbox)
        try:
            # Shielded: a cancellation arriving now must not skip the cleanup.
            await asyncio.shield(
                self.placement.execute(
                    "sandbox",
                    SandboxActivities.destroy,
                    DestroySandboxInput(task_id=self.task.task_id, sandbox=sandbox),
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
            self.task.state.sandbox = None
            self.task.emit(
                EventType.SANDBOX_LEFT,
                sandbox_id=sandbox.sandbox_id,
                host=home.host,
                home_queue=home.queue,
                reason=f"its host did not take the destroy within {home.wait}; its reaper removes it",
            )
            return
        self.task.state.sandbox = None
        self.task.emit(EventType.SANDBOX_DESTROYED, sandbox_id=sandbox.sandbox_id)

    async def destroy_here(self, sandbox: SandboxRef) -> bool:
        """Destroy ``sandbox`` in a local activity, when this worker holds it (the usual case: the
        worker running the task also serves the sandbox role and made it). False when it does not, or
        could not: the destroy then goes to the sandbox's home as before."""
        try:
            await workflow.execute_local_activity_method(
                SandboxHere.destroy_here,
                DestroySandboxInput(task_id=self.task.task_id, sandbox=sandbox),
                **options.local_config(
                    options.SANDBOX_DESTROY_LOCAL, summary=f"destroy sandbox {sandbox.sandbox_id}"
                ),
            )
        except (ActivityError, ApplicationError) as err:  # a local activity's failure comes as itself
            if is_cancelled_exception(err):
                raise
            return False
        return True
