"""Task commands: start, status, inbox, approve / edit / reject, cancel.

Exit codes: 0 done, 1 the operation was refused or the task did not complete, 2 bad input.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from cli import render
from examples import EXAMPLES
from schemas import visibility
from schemas.approvals import ApprovalDecision, ApprovalRequest, DecisionKind, DecisionOutcome
from schemas.tasks import TaskInput, TaskPhase, TaskResult, TaskStatus
from schemas.validation import InvalidPayload, parse_decision, parse_task_input

WORKFLOW_TYPE = "AgentTask"
POLL_SECONDS = 0.5
INBOX_QUERY_TIMEOUT = timedelta(seconds=5)
# How long `approve` / `edit` / `reject` wait for a worker to answer; the decision expires then.
DECIDE_TIMEOUT_SECONDS = 30.0


class CliError(Exception):
    """A command cannot proceed; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def load_task_input(path: str | None, example: str | None) -> TaskInput:
    """Read and validate a TaskSpec (or TaskInput) JSON file, or a named example's.

    Raises:
        CliError: (exit 2) the file is missing, not JSON, or names invalid fields.
    """
    if example is not None:
        if example not in EXAMPLES:
            raise CliError(f"unknown example {example!r}; examples: {', '.join(EXAMPLES)}", 2)
        file = EXAMPLES[example]
    elif path is not None:
        file = Path(path)
    else:
        raise CliError("give a TaskSpec JSON file or --example NAME", 2)
    try:
        raw = json.loads(file.read_text())
    except OSError as err:
        raise CliError(f"cannot read {file}: {err.strerror}", 2) from None
    except json.JSONDecodeError as err:
        raise CliError(
            f"{file}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})", 2
        ) from None
    try:
        return parse_task_input(raw)
    except InvalidPayload as err:
        raise CliError(f"{file}: {err}", 2) from None


async def start_task(
    client: Client, task: TaskInput, task_id: str, task_queue: str
) -> tuple[WorkflowHandle[Any, Any], bool]:
    """Start the task unless a task with this id exists (running or closed): (handle, started)."""
    try:
        handle = await client.start_workflow(
            WORKFLOW_TYPE,
            task,
            id=task_id,
            task_queue=task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            result_type=TaskResult,
        )
        return handle, True
    except WorkflowAlreadyStartedError:
        return client.get_workflow_handle(task_id, result_type=TaskResult), False


async def query_status(handle: WorkflowHandle[Any, Any], rpc_timeout: timedelta | None = None) -> TaskStatus:
    """The task's ``status`` query answer."""
    try:
        return await handle.query("status", result_type=TaskStatus, rpc_timeout=rpc_timeout)
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise CliError(f"no task {handle.id!r}") from None
        raise


_SHOWN_EVENTS = frozenset(
    {
        "phase.changed", "turn.finished", "sandbox.exec", "sandbox.destroyed", "approval.requested",
        "approval.decided", "approval.ignored", "write.confirmed", "write.reconciled", "task.finished",
    }
)  # fmt: skip


class Follower:
    """Prints a task's progress (phases, events, new approval requests) once each."""

    def __init__(self, handle: WorkflowHandle[Any, Any], out: TextIO) -> None:
        self.handle = handle
        self.out = out
        self.seen = 0
        self.shown_requests: set[str] = set()

    async def run(self, *, stop_when_awaiting: bool = False) -> TaskStatus:
        """Follow until the task closes, or until it waits for approval when asked to."""
        while True:
            status = await query_status(self.handle)
            for event in status.last_events:
                if event.seq > self.seen:
                    self.seen = event.seq
                    if event.type.value in _SHOWN_EVENTS:
                        summary = render._event_summary(event.data)[:110]
                        print(f"  {event.at:%H:%M:%S} {event.type.value:<18} {summary}", file=self.out)
            new = [r for r in status.pending if r.request_id not in self.shown_requests]
            for request in new:
                self.shown_requests.add(request.request_id)
                print("\n".join(render.request_lines(self.handle.id, request)), file=self.out)
            if new and stop_when_awaiting:
                return status
            description = await self.handle.describe()
            if description.status is not WorkflowExecutionStatus.RUNNING:
                return status
            await asyncio.sleep(POLL_SECONDS)


async def outcome(handle: WorkflowHandle[Any, Any], out: TextIO) -> int:
    """Print a closed task's result; 0 when it completed."""
    try:
        result: TaskResult = await handle.result()
    except Exception as err:  # failed, cancelled, terminated: the status query says why
        status = await query_status(handle)
        print(f"task {handle.id} ended {status.phase.value}: {status.reason or err}", file=out)
        return 1
    print(render.result_text(result), file=out)
    return 0 if result.phase is TaskPhase.COMPLETED else 1


async def cmd_start(client: Client, args: Any, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    task = load_task_input(args.file, args.example)
    task_id = args.id or f"task-{uuid.uuid4().hex[:12]}"
    handle, started = await start_task(client, task, task_id, args.task_queue)
    if started:
        print(
            f"started task {task_id} (agent {task.spec.agent}, tenant {task.spec.tenant}) "
            f"on {args.task_queue}",
            file=out,
        )
    else:
        print(f"task {task_id} already exists; not started again", file=out)
    if not args.wait:
        return 0
    await Follower(handle, out).run()
    return await outcome(handle, out)


async def cmd_status(client: Client, args: Any, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    status = await query_status(client.get_workflow_handle(args.task_id))
    print(status.model_dump_json(indent=2) if args.json else render.status_text(status), file=out)
    return 0


async def cmd_inbox(client: Client, args: Any, out: TextIO | None = None) -> int:
    """Every task waiting for a human, found through visibility (search attributes).

    Each task's pending requests come from its ``status`` query. A task whose worker does not answer
    within a few seconds is still listed, from what visibility knows, so one dead worker cannot hide
    the rest of the inbox.
    """
    out = out or sys.stdout
    query = visibility.AWAITING_QUERY
    if args.tenant:
        query += f" AND {visibility.TENANT.name} = '{args.tenant}'"
    executions = [e async for e in client.list_workflows(query)]
    answers = await asyncio.gather(
        *(
            query_status(client.get_workflow_handle(e.id), rpc_timeout=INBOX_QUERY_TIMEOUT)
            for e in executions
        ),
        return_exceptions=True,
    )
    answered: list[TaskStatus] = []
    unanswered: list[dict[str, Any]] = []
    for execution, answer in zip(executions, answers, strict=True):
        if isinstance(answer, TaskStatus):
            if answer.pending:
                answered.append(answer)
            continue
        attributes = execution.typed_search_attributes
        unanswered.append(
            {
                "task_id": execution.id,
                "tenant": attributes.get(visibility.TENANT),
                "agent": attributes.get(visibility.AGENT),
                "approvers": attributes.get(visibility.APPROVERS) or [],
                "error": f"no worker answered the status query ({answer})",
            }
        )
    if args.json:
        fields = {"task_id", "tenant", "agent", "phase", "pending"}
        listing = [s.model_dump(mode="json", include=fields) for s in answered] + unanswered
        print(json.dumps(listing, indent=2), file=out)
        return 0
    if not answered and not unanswered:
        print("no task is waiting for approval", file=out)
    for status in answered:
        print(f"task {status.task_id}  agent={status.agent}  tenant={status.tenant}", file=out)
        for request in status.pending:
            print("\n".join(render.request_lines(status.task_id, request)), file=out)
    for entry in unanswered:
        print(f"task {entry['task_id']}  agent={entry['agent']}  tenant={entry['tenant']}", file=out)
        print(
            f"  approvers: {', '.join(entry['approvers'])}; details unavailable: {entry['error']}", file=out
        )
    return 0


async def send_decision(
    client: Client,
    task_id: str,
    decision: ApprovalDecision,
    *,
    as_signal: bool = False,
    wait_seconds: float = DECIDE_TIMEOUT_SECONDS,
) -> DecisionOutcome | None:
    """Send a decision by update (checked, synchronous answer) or by signal (fire and forget).

    An update waits at most ``wait_seconds`` for a worker to answer, and carries ``expires_at``
    (now + ``wait_seconds``): a task that receives it later, when this call has given up, refuses it
    rather than act on a decision whose sender was told it failed. A signal is durable by design: it
    waits in the task's history and takes effect when a worker next runs the task.

    Raises:
        CliError: the task refused the decision, does not exist / has ended, or no worker answered.
    """
    handle = client.get_workflow_handle(task_id)
    if not as_signal:
        expires_at = datetime.now(UTC) + timedelta(seconds=wait_seconds)
        decision = decision.model_copy(update={"expires_at": expires_at})
    payload = decision.model_dump(mode="json", exclude_none=True)
    try:
        if as_signal:
            await handle.signal("submit_decision", payload)
            return None
        return await asyncio.wait_for(
            handle.execute_update(
                "decide", payload, result_type=DecisionOutcome, rpc_timeout=timedelta(seconds=wait_seconds)
            ),
            wait_seconds,
        )
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        raise CliError(
            f"no worker answered for task {task_id} within {wait_seconds:g} s (is a worker running on its "
            f"task queue?); the decision was not applied, and the task refuses it if it arrives after "
            f"{decision.expires_at.isoformat() if decision.expires_at else 'now'}: decide again once a "
            "worker runs"
        ) from None
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        raise CliError(f"decision refused: {getattr(cause, 'message', None) or cause}") from None
    except RPCError as err:
        raise CliError(f"cannot reach task {task_id}: {err.message}") from None


async def request_chain(handle: WorkflowHandle[Any, Any], request_id: str, wait_seconds: float) -> str | None:
    """The run chain a signature on ``request_id`` must cover: the pending request's (None when the
    task started before run chains, or the request is not pending: the task then ignores the
    decision whatever it carries). A query needs a worker: none answering within ``wait_seconds``
    is an error that says so."""
    try:
        pending = await asyncio.wait_for(
            handle.query(
                "pending_approvals",
                result_type=list[ApprovalRequest],
                rpc_timeout=timedelta(seconds=wait_seconds),
            ),
            wait_seconds,
        )
    except TimeoutError:
        raise CliError(
            f"no worker answered for task {handle.id} within {wait_seconds:g} s (is a worker running on "
            "its task queue?); nothing was signed or sent: decide again once a worker runs"
        ) from None
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise CliError(f"no task {handle.id!r}") from None
        if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):  # the rpc timeout
            raise CliError(
                f"no worker answered for task {handle.id} within {wait_seconds:g} s; nothing was sent"
            ) from None
        raise
    return next((r.run_chain for r in pending if r.request_id == request_id), None)


async def cmd_decide(client: Client, args: Any, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    raw: dict[str, Any] = {
        "request_id": args.request,
        "version": args.version,
        "decision": args.kind,
        "principal": args.principal,
    }
    if args.reason:
        raw["reason"] = args.reason
    if args.kind == DecisionKind.EDIT.value:
        try:
            raw["edited_args"] = json.loads(args.args)
        except (TypeError, json.JSONDecodeError) as err:
            raise CliError(f"--args must be a JSON object: {err}", 2) from None
    try:
        decision = parse_decision(raw)
    except InvalidPayload as err:
        raise CliError(str(err), 2) from None
    if args.sign:
        from security.signing import DEFAULT_KEY_DIR, load_private_key, sign

        try:
            key = load_private_key(args.principal, args.keys_dir or DEFAULT_KEY_DIR)
        except (OSError, ValueError) as err:
            raise CliError(f"cannot sign as {args.principal}: {err}", 2) from None
    wait_seconds = getattr(args, "timeout", None) or DECIDE_TIMEOUT_SECONDS
    if args.sign:
        handle = client.get_workflow_handle(args.task_id)
        chain = await request_chain(handle, decision.request_id, wait_seconds)
        decision = decision.model_copy(update={"signature": sign(key, args.task_id, decision, chain)})
    answer = await send_decision(
        client, args.task_id, decision, as_signal=args.signal, wait_seconds=wait_seconds
    )
    if answer is None:
        print(
            f"sent {args.kind} for {args.request} to {args.task_id} as a signal (see `agent-worker status`)",
            file=out,
        )
    elif not answer.accepted:
        raise CliError(f"decision refused: {answer.detail}")
    else:
        print(f"{args.task_id}: {answer.detail}", file=out)
    return 0


async def cmd_cancel(client: Client, args: Any, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    handle = client.get_workflow_handle(args.task_id)
    try:
        await handle.cancel()
    except RPCError as err:
        raise CliError(f"cannot cancel {args.task_id}: {err.message}") from None
    print(f"cancellation requested for {args.task_id}; its sandbox is destroyed before it ends", file=out)
    return 0
