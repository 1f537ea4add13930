"""Task commands: start, status, inbox, approve / edit / reject, say, cancel.

They speak to tasks only through ``agent_worker.client.AgentWorkerClient`` (the one owner of the
workflow's protocol) and print through ``cli.render``. Exit codes: 0 done, 1 the operation was
refused or the task did not complete, 2 bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from agent_worker.cli import render
from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.cli.grants import add_remember_arguments, remember_from
from agent_worker.schemas.approvals import DecisionKind
from agent_worker.schemas.tasks import TaskInput, TaskPhase, TaskResult, TaskStatus
from agent_worker.schemas.validation import (
    InvalidPayload,
    check_task_id,
    parse_follow_up,
    parse_task_input,
)
from agent_worker.schemas.visibility import DEFAULT_TASK_QUEUE

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from agent_worker.client import AgentWorkerClient
    from agent_worker.decisions import Decision

T = TypeVar("T")

__all__ = [
    "CliError",
    "Follower",
    "load_task_input",
    "outcome",
    "register",
    "send_decision",
]  # CliError: its old home

POLL_SECONDS = 0.5
INBOX_QUERY_TIMEOUT = timedelta(seconds=5)
# How long `approve` / `edit` / `reject` wait for a worker to answer; the decision expires then.
DECIDE_TIMEOUT_SECONDS = 30.0
# A worker answers a decision within a second or two; past this, say on stderr that we are waiting.
WAITING_NOTICE_SECONDS = 2.0


def register(sub: Any) -> None:
    """Add ``start``, ``status``, ``inbox``, ``approve``, ``edit``, ``reject``, ``say`` and ``cancel``."""
    start = sub.add_parser("start", help="start a task from a TaskSpec JSON file or an example")
    start.add_argument("file", nargs="?", help="TaskSpec (or TaskInput) JSON file")
    start.add_argument("--example", help="start a bundled example instead, e.g. monthly-report")
    start.add_argument("--id", help="task id (= workflow id); starting an existing id starts nothing")
    start.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    start.add_argument("--wait", action="store_true", help="show progress and wait for the outcome")
    start.set_defaults(handler=cmd_start)

    status = sub.add_parser("status", help="a task's phase, pending approvals, budgets, recent events")
    status.add_argument("task_id")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)

    inbox = sub.add_parser("inbox", help="every task waiting for approval (--web: the approval inbox pages)")
    inbox.add_argument("--tenant")
    inbox.add_argument("--json", action="store_true")
    inbox.add_argument("--web", action="store_true", help="serve the web approval inbox instead of printing")
    inbox.add_argument("--bind", default="127.0.0.1:8090", help="--web: host:port (default 127.0.0.1:8090)")
    inbox.add_argument(
        "--auth",
        choices=["token", "header"],
        default="token",
        help="--web: 'token' (sign in with a token from --tokens) or 'header' (a trusted proxy names the "
        "principal; only safe when nothing but that proxy reaches --bind)",
    )
    inbox.add_argument(
        "--tokens", type=Path, help='--web: JSON file {"<token>": "<principal>"} for --auth token'
    )
    inbox.add_argument(
        "--principal-header",
        default="X-Forwarded-User",
        help="--web: the header the proxy sets (--auth header)",
    )
    inbox.add_argument(
        "--keys-dir", type=Path, help="--web: principals' signing keys (default ~/.agent-worker/keys)"
    )
    inbox.add_argument(
        "--data-dir",
        type=Path,
        help="--web: data dir of the artifact store (default AGENT_WORKER_DATA_DIR or .agent-worker)",
    )
    inbox.set_defaults(handler=cmd_inbox, config_overrides=lambda a: {"data_dir": a.data_dir})

    for kind, help_text in (
        ("approve", "approve a request"),
        ("edit", "approve with changed arguments"),
        ("reject", "reject a request"),
        ("respond", "answer a proposed action with a message instead of running it"),
        ("answer", "answer a question the agent asked (ask_human)"),
    ):
        p = sub.add_parser(kind, help=help_text)
        p.set_defaults(kind=kind, handler=cmd_decide)
        p.add_argument("task_id")
        p.add_argument("--request", required=True, help="request id, e.g. req-1")
        p.add_argument(
            "--version", required=True, help="the request's version (sha256:...) you are deciding on"
        )
        p.add_argument("--as", dest="principal", required=True, help="your principal, e.g. finance-lead")
        p.add_argument("--reason", help="why (for a rejection, the message the model sees)")
        p.add_argument(
            "--signal",
            action="store_true",
            help="send as the submit_decision signal instead of the decide update",
        )
        p.add_argument(
            "--sign", action="store_true", help="sign with the principal's key (agent-worker keys new)"
        )
        p.add_argument(
            "--timeout",
            type=float,
            default=DECIDE_TIMEOUT_SECONDS,
            help="seconds to wait for a worker's answer (default 30); past it the decision expires "
            "and the task refuses it if it arrives later",
        )
        p.add_argument("--keys-dir", type=Path, help="where private keys live (default ~/.agent-worker/keys)")
        if kind == "edit":
            p.add_argument("--args", required=True, help="JSON object of the arguments to change")
        if kind == "approve":
            add_remember_arguments(p)
        if kind == "respond":
            p.add_argument("--message", required=True, help="what the model reads instead of the result")
        if kind == "answer":
            p.add_argument("answer", help="the answer: text, one of the options, or (--json) a JSON value")
            p.add_argument("--json", action="store_true", help="the answer is JSON (a form's answer)")

    say = sub.add_parser("say", help="send a running task follow-up input (its agent's next turn sees it)")
    say.add_argument("task_id")
    say.add_argument("text", help="the message, as the user's next words to the agent")
    say.add_argument("--principal", help="who says it (recorded with the input)")
    say.set_defaults(handler=cmd_say)

    cancel = sub.add_parser("cancel", help="cancel a task (its sandbox is destroyed)")
    cancel.add_argument("task_id")
    cancel.set_defaults(handler=cmd_cancel)


def load_task_input(path: str | None, example: str | None, text: str | None = None) -> TaskInput:
    """Read and validate a TaskSpec (or TaskInput) JSON file, a named example's, or ``text`` (the
    JSON itself, given as ``--spec``).

    Raises:
        CliError: (exit 2) the file is missing, not JSON, or names invalid fields.
    """
    from agent_worker.examples import EXAMPLES

    file: Path | None = None
    if text is None and example is not None:
        if example not in EXAMPLES:
            raise CliError(f"unknown example {example!r}; examples: {', '.join(EXAMPLES)}", 2)
        file = EXAMPLES[example]
    elif text is None and path is not None:
        file = Path(path)
    elif text is None:
        raise CliError("give a TaskSpec JSON file or --example NAME", 2)
    where = file or "--spec"
    try:
        raw = json.loads(file.read_text() if file is not None else text or "")
    except OSError as err:
        raise CliError(f"cannot read {file}: {err.strerror}", 2) from None
    except json.JSONDecodeError as err:
        raise CliError(
            f"{where}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})", 2
        ) from None
    try:
        return parse_task_input(raw)
    except InvalidPayload as err:
        raise CliError(f"{where}: {err}", 2) from None


_SHOWN_EVENTS = frozenset(
    {
        "phase.changed", "turn.finished", "sandbox.exec", "sandbox.destroyed", "approval.requested",
        "approval.decided", "approval.ignored", "write.confirmed", "write.reconciled", "task.finished",
    }
)  # fmt: skip


class Follower:
    """Prints a task's progress (phases, events, new approval requests) once each."""

    def __init__(self, tasks: AgentWorkerClient, task_id: str, out: TextIO) -> None:
        self.tasks = tasks
        self.task_id = task_id
        self.out = out
        self.seen = 0
        self.shown_requests: set[str] = set()

    async def run(self, *, stop_when_awaiting: bool = False) -> TaskStatus:
        """Follow until the task closes, or until it waits for approval when asked to."""
        from temporalio.client import WorkflowExecutionStatus

        while True:
            status = await self.tasks.status(self.task_id)
            for event in status.last_events:
                if event.seq > self.seen:
                    self.seen = event.seq
                    if event.type.value in _SHOWN_EVENTS:
                        print(render.progress_line(event), file=self.out)
            new = [r for r in status.pending if r.request_id not in self.shown_requests]
            for request in new:
                self.shown_requests.add(request.request_id)
                print("\n".join(render.request_lines(self.task_id, request)), file=self.out)
            if new and stop_when_awaiting:
                return status
            description = await self.tasks.handle(self.task_id).describe()
            if description.status is not WorkflowExecutionStatus.RUNNING:
                return status
            await asyncio.sleep(POLL_SECONDS)


async def outcome(tasks: AgentWorkerClient, task_id: str, out: TextIO) -> int:
    """Print a closed task's result; 0 when it completed."""
    try:
        result: TaskResult = await tasks.result(task_id)
    except Exception as err:  # failed, cancelled, terminated: the status query says why
        status = await tasks.status(task_id)
        print(f"task {task_id} ended {status.phase.value}: {status.reason or err}", file=out)
        return 1
    print(render.result_text(result), file=out)
    return 0 if result.phase is TaskPhase.COMPLETED else 1


async def cmd_start(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        task_id = check_task_id(args.id, "--id") if args.id is not None else f"task-{uuid.uuid4().hex[:12]}"
    except InvalidPayload as err:
        raise CliError(str(err), 2) from None
    task = load_task_input(args.file, args.example)
    tasks = await ctx.tasks(args.task_queue)
    ref = await tasks.start(task, task_id)
    if ref.started:
        print(
            f"started task {task_id} (agent {task.spec.agent}, tenant {task.spec.tenant}) "
            f"on {args.task_queue}",
            file=out,
        )
    else:
        print(f"task {task_id} already exists; not started again", file=out)
    if not args.wait:
        return 0
    await Follower(tasks, task_id, out).run()
    return await outcome(tasks, task_id, out)


async def cmd_status(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    status = await (await ctx.tasks()).status(args.task_id)
    print(status.model_dump_json(indent=2) if args.json else render.status_text(status), file=out)
    return 0


async def cmd_inbox(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    """Every task waiting for a human, found through visibility (search attributes).

    Each task's pending requests come from its ``status`` query. A task whose worker does not answer
    within a few seconds is still listed, from what visibility knows, so one dead worker cannot hide
    the rest of the inbox. ``--web`` serves the approval inbox pages instead (``inbox``).
    """
    if args.web:
        try:
            from agent_worker.inbox import cmd_inbox_web
        except ImportError as err:  # Starlette and uvicorn come with the extra
            raise CliError(
                f"the web inbox needs its extra: pip install 'agent-worker[api]' ({err})"
            ) from None

        return await cmd_inbox_web(await ctx.temporal(), args, out, config=ctx.config)
    out = out or sys.stdout
    tasks = await ctx.tasks()
    try:
        found = await tasks.awaiting(tenant=args.tenant, wait_seconds=INBOX_QUERY_TIMEOUT.total_seconds())
    except ValueError as err:
        raise CliError(f"--tenant: {err}", 2) from None
    answered = [e for e in found if e.error is None]
    unanswered = [e for e in found if e.error is not None]
    if args.json:
        listing = [
            {
                "task_id": e.task_id,
                "tenant": e.tenant,
                "agent": e.agent,
                "phase": e.phase.value if e.phase else None,
                "pending": [r.model_dump(mode="json") for r in e.requests],
            }
            for e in answered
        ] + [
            {
                "task_id": e.task_id,
                "tenant": e.tenant,
                "agent": e.agent,
                "approvers": e.approvers,
                "error": e.error,
            }
            for e in unanswered
        ]
        print(json.dumps(listing, indent=2), file=out)
        return 0
    if not found:
        print("no task is waiting for approval", file=out)
    for entry in [*answered, *unanswered]:
        print("\n".join(render.awaiting_lines(entry)), file=out)
    return 0


def _no_worker(task_id: str, wait_seconds: float, tail: str) -> CliError:
    return CliError(
        f"no worker answered for task {task_id} within {wait_seconds:g} s (is a worker running on its "
        f"task queue?); {tail}"
    )


async def _saying_we_wait(work: Awaitable[T], task_id: str, wait_seconds: float, what: str) -> T:
    """``work``'s result; if it takes longer than a worker normally does, a line on stderr says the
    command is waiting for a worker and until when, so a stopped fleet is never a silent hang."""

    async def notice() -> None:
        await asyncio.sleep(min(WAITING_NOTICE_SECONDS, wait_seconds / 3))
        print(
            f"waiting for a worker to take {what} on task {task_id} (no worker has answered yet; "
            f"giving up after {wait_seconds:g} s, --timeout to change)...",
            file=sys.stderr,
            flush=True,
        )

    noticing = asyncio.create_task(notice())
    try:
        return await work
    finally:
        noticing.cancel()


async def cmd_decide(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    """``approve`` / ``edit`` / ``reject`` / ``respond`` / ``answer``: by the ``decide`` update (a
    checked, synchronous answer) or, with ``--signal``, by the durable ``submit_decision`` signal.

    An update waits at most ``--timeout`` seconds for a worker and carries ``expires_at`` (now +
    ``--timeout``): a task that receives it later, when this command has given up, refuses it rather
    than act on a decision whose sender was told it failed. With ``--sign`` the signature covers the
    pending request's run chain, read first (within the same ``--timeout``; nothing is sent when no
    worker answers).
    """
    from agent_worker.decisions import Decision, InvalidDecision

    out = out or sys.stdout
    answer: Any = None
    if args.kind == DecisionKind.ANSWER.value:
        try:
            answer = json.loads(args.answer) if args.json else args.answer
        except json.JSONDecodeError as err:
            raise CliError(f"the answer is not JSON (drop --json for text): {err}", 2) from None
    edited: Any = None
    if args.kind == DecisionKind.EDIT.value:
        try:
            edited = json.loads(args.args)
        except (TypeError, json.JSONDecodeError) as err:
            raise CliError(f"--args must be a JSON object: {err}", 2) from None
    reason = args.message if args.kind == DecisionKind.RESPOND.value else args.reason
    decision = Decision(
        request_id=args.request,
        kind=args.kind,
        principal=args.principal,
        version=args.version,
        reason=reason or None,
        edited_args=edited,
        answer=answer,
        remember=remember_from(args).get("remember"),
    )
    try:
        decision.build()  # bad input exits 2 before anything connects
    except InvalidDecision as err:
        raise CliError(str(err), 2) from None
    key = None
    if args.sign:
        from agent_worker.security.signing import DEFAULT_KEY_DIR, load_private_key

        try:
            key = load_private_key(args.principal, args.keys_dir or DEFAULT_KEY_DIR)
        except (OSError, ValueError) as err:
            raise CliError(f"cannot sign as {args.principal}: {err}", 2) from None
    wait_seconds = getattr(args, "timeout", None) or DECIDE_TIMEOUT_SECONDS
    tasks = await ctx.tasks()
    reply = await send_decision(
        tasks, args.task_id, decision, as_signal=args.signal, wait_seconds=wait_seconds, signer=key
    )
    if reply is None:
        print(
            f"sent {args.kind} for {args.request} to {args.task_id} as a signal (see `agent-worker status`)",
            file=out,
        )
    else:
        print(f"{args.task_id}: {reply.detail}", file=out)
    return 0


def _not_applied(expires_at: datetime | None) -> str:
    expiry = expires_at.isoformat() if expires_at else "now"
    return (
        f"the decision was not applied, and the task refuses it if it arrives after {expiry}: decide "
        "again once a worker runs, or send it with --signal (Temporal keeps the signal and the task "
        "applies it when a worker picks it up)"
    )


async def send_decision(
    tasks: AgentWorkerClient,
    task_id: str,
    decision: Decision,
    *,
    as_signal: bool,
    wait_seconds: float,
    signer: Ed25519PrivateKey | None = None,
) -> Any:
    """Send ``decision`` through ``AgentWorkerClient.submit`` (by update, or by signal with
    ``as_signal``; signed over the request's run chain with ``signer``), with the CLI's messages.

    Raises:
        CliError: the task refused it, does not exist or has ended, or no worker answered within
            ``wait_seconds`` (the decision then expires: the task refuses it if it arrives later).
    """
    from agent_worker.client import DecisionRefused, TaskNotFound, WorkerUnreachable
    from agent_worker.decisions import InvalidDecision

    # One RPC (the update), two with a signer (the status query first, for the run chain to sign).
    expires_at = None if as_signal else datetime.now(UTC) + timedelta(seconds=wait_seconds)
    sent = tasks.submit(
        task_id,
        decision,
        signer=signer,
        via="signal" if as_signal else "update",
        wait_seconds=wait_seconds,
        expires_at=expires_at,
    )
    try:
        return await _saying_we_wait(sent, task_id, wait_seconds, "the decision")
    except WorkerUnreachable as err:
        if err.stage == "read":
            tail = "nothing was signed or sent: decide again once a worker runs"
        else:
            tail = _not_applied(expires_at)
        raise _no_worker(task_id, wait_seconds, tail) from None
    except InvalidDecision as err:
        raise CliError(str(err), 2) from None
    except DecisionRefused as err:
        raise CliError(f"decision refused: {err.reason}") from None
    except TaskNotFound as err:
        raise CliError(f"cannot reach task {task_id}: {err}") from None


async def cmd_say(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    from agent_worker.client import AgentWorkerError

    out = out or sys.stdout
    try:
        follow_up = parse_follow_up({"text": args.text, "principal": args.principal})
    except InvalidPayload as err:
        raise CliError(str(err), code=2) from None
    try:
        await (await ctx.tasks()).say(args.task_id, follow_up.text, principal=follow_up.principal)
    except AgentWorkerError as err:
        raise CliError(f"cannot reach task {args.task_id}: {err}") from None
    print(
        f"input sent to {args.task_id}; its agent's next turn sees it (`agent-worker status "
        f"{args.task_id}` shows input.added, or input.ignored with the reason)",
        file=out,
    )
    return 0


async def cmd_cancel(args: argparse.Namespace, ctx: CliContext, out: TextIO | None = None) -> int:
    from agent_worker.client import AgentWorkerError

    out = out or sys.stdout
    try:
        await (await ctx.tasks()).cancel(args.task_id)
    except AgentWorkerError as err:
        raise CliError(f"cannot cancel {args.task_id}: {err}") from None
    print(f"cancellation requested for {args.task_id}; its sandbox is destroyed before it ends", file=out)
    return 0
