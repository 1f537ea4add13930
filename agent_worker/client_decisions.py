"""The decision path of ``AgentWorkerClient`` (issue 43, item 1): read the request, build the
decision, sign it and send it, in at most two RPCs. The CLI, the inbox and the HTTP API all decide
through ``submit``; ``decide`` spells a decision in arguments, ``send_decision`` sends one already
built. Kept apart from ``agent_worker.client`` to keep each module readable; the client is made of
this class. Like the client, it imports no workflow, agent, sandbox or store code."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from agent_worker.decisions import Decision, InvalidDecision
from agent_worker.errors import (
    AgentWorkerError,
    DecisionRefused,
    TaskNotFound,
    WorkerUnreachable,
    cause_message,
)
from agent_worker.schemas.visibility import DECISION_SIGNAL, DECISION_UPDATE

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from agent_worker.schemas.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        DecisionKind,
        DecisionOutcome,
    )
    from agent_worker.schemas.tasks import TaskResult, TaskStatus

    Signer = Ed25519PrivateKey | Callable[[TaskStatus, ApprovalDecision], Ed25519PrivateKey | None]

DEFAULT_TIMEOUT = 30.0
"""Seconds a query or a ``decide`` update waits for a worker before ``WorkerUnreachable``."""
# What an update's RPC may answer when the server or the worker is busy, and the decision is sent
# again for (with the same update id), and the pause before each resend.
RESEND_UPDATE = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.DEADLINE_EXCEEDED}
)
RESEND_PAUSE = 0.25


class DecisionPath:
    """Deciding a task's pending requests: the part of ``AgentWorkerClient`` that sends decisions."""

    temporal: Client
    task_queue: str

    if TYPE_CHECKING:  # the client's own calls, which these use

        def handle(self, task_id: str) -> WorkflowHandle[Any, TaskResult]: ...

        async def status(self, task_id: str, *, wait_seconds: float = DEFAULT_TIMEOUT) -> TaskStatus: ...

        def _unreachable(
            self, task_id: str, wait_seconds: float, what: str, *, decision: bool = False
        ) -> WorkerUnreachable: ...

    async def decide(
        self,
        task_id: str,
        request_id: str,
        decision: DecisionKind | str,
        principal: str,
        *,
        version: str | None = None,
        edited_args: dict[str, Any] | None = None,
        reason: str | None = None,
        answer: Any = None,
        sign_with: Ed25519PrivateKey | None = None,
        via: Literal["update", "signal"] = "update",
        wait_seconds: float = DEFAULT_TIMEOUT,
        remember: dict[str, Any] | None = None,
    ) -> DecisionOutcome | None:
        """Decide a pending request: ``approve``, ``edit`` (with ``edited_args``), ``reject`` or
        ``respond`` (with a ``reason`` the model sees), or ``answer`` a question (with ``answer``). An
        approve with ``remember`` (``schemas.grants.Remember`` as JSON: ``scope``, ``when``,
        ``until``) is remembered as a grant (the policy must allow it). ``submit`` with a
        ``Decision`` does the same; this spells it in arguments.

        Raises:
            DecisionRefused: as ``submit``, and for a payload that cannot be built (naming the field).
            TaskNotFound: no such task, or it is not running.
            WorkerUnreachable: no worker answered within ``wait_seconds`` seconds.
        """
        kind = decision if isinstance(decision, str) else decision.value
        typed = Decision(
            request_id, kind, principal, version, reason, edited_args, answer=answer, remember=remember
        )
        try:
            return await self.submit(task_id, typed, signer=sign_with, via=via, wait_seconds=wait_seconds)
        except InvalidDecision as err:
            raise DecisionRefused(task_id, request_id, str(err)) from None

    async def submit(
        self,
        task_id: str,
        decision: Decision,
        *,
        signer: Signer | None = None,
        check: Callable[[TaskStatus, ApprovalRequest | None], Awaitable[None]] | None = None,
        via: Literal["update", "signal"] = "update",
        wait_seconds: float = DEFAULT_TIMEOUT,
        read_seconds: float | None = None,
        expires_at: datetime | None = None,
    ) -> DecisionOutcome | None:
        """Read the request, build the decision, sign it and send it: the one decision path (the
        CLI, the inbox and the HTTP API all come here). Two RPCs at most: the task's ``status`` query,
        only when something needs the request (a version left out, an edit or typed answer compared
        with it, a signature over its run chain, a ``check``), then the update (or the signal). What
        the read checks, the update's validator checks again; nothing else is read.

        ``check`` sees the status and the pending request (None when not pending) before anything
        is built or sent, and raises to refuse (the inbox's and the API's access rules). ``signer``
        is a private key, or a callable given the status and the built decision that answers the key
        to sign with (None: unsigned); the signature covers the request's run chain. By ``update``
        the decision carries ``expires_at`` (now + ``wait_seconds`` unless given) so a late delivery
        is refused rather than applied after this call gave up. By ``signal`` it is durable and
        unanswered (None): a bad one is recorded as ignored, with the reason, in ``status(...).ignored``.

        Raises:
            InvalidDecision: the decision cannot be built (naming the field); nothing was sent.
            DecisionRefused: the task refused it, or the request is not pending (when it was read).
            TaskNotFound: no such task, or it is not running.
            WorkerUnreachable: no worker answered within the time (``stage`` says whether the read
                or the decision went unanswered).
        """
        status: TaskStatus | None = None
        request: ApprovalRequest | None = None
        if decision.needs_request or signer is not None or check is not None:
            read_wait = read_seconds if read_seconds is not None else wait_seconds
            try:
                status = await self.status(task_id, wait_seconds=read_wait)
            except WorkerUnreachable as err:
                err.stage = "read"
                raise
            request = next((r for r in status.pending if r.request_id == decision.request_id), None)
            if check is not None:
                await check(status, request)
            if request is None:
                waiting = ", ".join(r.request_id for r in status.pending) or "none"
                raise DecisionRefused(task_id, decision.request_id, f"not pending (pending: {waiting})")
        if via == "update" and expires_at is None:
            expires_at = datetime.now(UTC) + timedelta(seconds=wait_seconds)
        built = decision.build(request, expires_at=expires_at if via == "update" else None)
        key = signer(status, built) if callable(signer) and status is not None else signer
        if key is not None:
            from agent_worker.security.signing import sign

            chain = request.run_chain if request else None
            built = built.model_copy(update={"signature": sign(key, task_id, built, chain)})
        return await self.send_decision(task_id, built, via=via, wait_seconds=wait_seconds)

    async def send_decision(
        self,
        task_id: str,
        decision: ApprovalDecision,
        *,
        via: Literal["update", "signal"] = "update",
        wait_seconds: float = DEFAULT_TIMEOUT,
    ) -> DecisionOutcome | None:
        """Send a decision already built (and signed) by the caller, as ``decide`` sends its own: by
        update it gets ``expires_at`` (now + ``wait_seconds``) unless it carries one already.

        Raises:
            DecisionRefused: the task refused it.
            TaskNotFound: no running task with that id.
            WorkerUnreachable: no worker answered within ``wait_seconds`` seconds.
        """
        from agent_worker.schemas.approvals import DecisionOutcome

        if via == "update" and decision.expires_at is None:
            expires_at = datetime.now(UTC) + timedelta(seconds=wait_seconds)
            decision = decision.model_copy(update={"expires_at": expires_at})
        handle = self.handle(task_id)
        payload = decision.model_dump(mode="json", exclude_none=True)
        try:
            if via == "signal":
                await handle.signal(DECISION_SIGNAL, payload)
                return None
            # One update id for every send of this decision: the server answers a resend with the
            # first send's outcome, so a decision sent again is applied once.
            update_id, deadline = f"decide-{uuid.uuid4().hex}", time.monotonic() + wait_seconds
            while True:
                left = deadline - time.monotonic()
                try:
                    outcome = await asyncio.wait_for(
                        handle.execute_update(
                            DECISION_UPDATE,
                            payload,
                            id=update_id,
                            result_type=DecisionOutcome,
                            rpc_timeout=timedelta(seconds=max(left, 0.001)),
                        ),
                        left,
                    )
                    break
                except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
                    # A busy server gives up waiting for the worker early, refuses more updates in
                    # flight for the task for a moment, or aborts an update whose workflow task it
                    # dropped: Temporal's "send it again". Sent again until the time is up.
                    retry = not isinstance(err, RPCError) or err.status in RESEND_UPDATE
                    if not retry or deadline - time.monotonic() < RESEND_PAUSE:
                        raise
                    await asyncio.sleep(RESEND_PAUSE)
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            raise self._unreachable(task_id, wait_seconds, "the decision", decision=True) from None
        except WorkflowUpdateFailedError as err:
            raise DecisionRefused(task_id, decision.request_id, cause_message(err)) from None
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise TaskNotFound(f"no running task {task_id!r}") from None
            raise AgentWorkerError(f"cannot reach task {task_id}: {err.message}") from None
        if not outcome.accepted:
            raise DecisionRefused(task_id, decision.request_id, outcome.detail)
        return outcome
