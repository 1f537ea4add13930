"""The client side of the task protocol, in one place.

Every name the ``AgentTask`` workflow answers to (its type, the queries ``status`` and
``pending_approvals``, the update ``decide``, the signals ``submit_decision`` and ``add_input``) is
declared once here, as the constants below (``tests/test_protocol_names.py`` checks them against the
names the workflow declares), with the type each answer decodes to; every payload goes out as plain
JSON (``model_dump(mode="json")``), as any other client would send. The module imports no workflow,
agent, sandbox or store code (``tests/test_light_client.py``): a process that only starts and decides
tasks stays light.

Errors::

    AgentWorkerError            anything this client refuses or cannot do
    ├── TaskNotFound            no task with that id (or none that is running, for a signal)
    ├── TaskEnded               the task closed without a result (failed, cancelled, terminated)
    ├── DecisionRefused         the task refused a decision; ``reason`` says why
    ├── WorkerUnreachable       no worker answered in time; nothing was applied
    ├── ScheduleNotFound        no schedule with that id (``agent_worker.schedules``)
    └── ScheduleExists          a schedule with that id exists already (``agent_worker.schedules``)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent_worker.decisions import Decision, InvalidDecision
from agent_worker.errors import AgentWorkerError
from agent_worker.schemas import visibility
from agent_worker.schemas.visibility import DEFAULT_TASK_QUEUE, STATUS_QUERY, queryable
from agent_worker.schemas.visibility import TASKS_QUERY as TASKS_QUERY  # re-exported: the public face
from agent_worker.schemas.visibility import WORKFLOW_TYPE as WORKFLOW_TYPE

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from agent_worker.activities.artifacts import ArtifactStore
    from agent_worker.schedules import TaskSchedules
    from agent_worker.schemas.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        DecisionKind,
        DecisionOutcome,
    )
    from agent_worker.schemas.forks import StepRecord
    from agent_worker.schemas.tasks import BatchView, TaskInput, TaskPhase, TaskResult, TaskSpec, TaskStatus

    Signer = Ed25519PrivateKey | Callable[[TaskStatus, ApprovalDecision], Ed25519PrivateKey | None]

# What an update's RPC may answer when the server or the worker is busy, and the decision is sent
# again for (with the same update id), and the pause before each resend.
RESEND_UPDATE = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.DEADLINE_EXCEEDED}
)
RESEND_PAUSE = 0.25

# The payload models are imported where a call first needs them, not with this module: building the
# pydantic models costs about as much as importing the Temporal client, and a process that imports the
# client without calling it yet (a CLI printing ``--help``, an app wiring itself up) need not pay it.
# The first call builds them, once.

DECISION_SIGNAL = "submit_decision"
"""The decision signal's name, for a client that is not this one (the Temporal CLI's ``--name``)."""
DECISION_UPDATE = "decide"
"""The decision update's name (answers a ``DecisionOutcome``)."""
INPUT_SIGNAL = "add_input"
"""The follow-up input signal's name."""
PENDING_QUERY = "pending_approvals"
"""The query answering the requests still waiting (a list of ``ApprovalRequest``)."""
DEFAULT_TIMEOUT = 30.0
# ``next_request`` asks the task itself every this many polls, whatever its search attributes say.
QUERY_EVERY_POLLS = 10
# The workflow task timeout a task starts with (Temporal's default is 10 s; continue-as-new keeps it).
# A worker that lost a task's cache (a restart, a flood of signals that outran it) replays the whole
# history in one workflow task, and a long history of signals takes seconds to decode in the SDK
# (about 1 ms a signal here). At 10 s that replay can time out on every attempt, and the task would
# never take another step; 60 s covers a 10,000-signal history on a busy 2-core worker. Other
# clients set the same: ``temporal workflow start --task-timeout 60s``.
WORKFLOW_TASK_TIMEOUT = timedelta(seconds=60)
"""Seconds a query or a ``decide`` update waits for a worker before ``WorkerUnreachable``."""


class TaskNotFound(AgentWorkerError):
    """Raised when no task has the id (or, for a signal or cancel, none is running under it)."""


class TaskEnded(AgentWorkerError):
    """Raised by ``result`` when the task closed without a result (failed, cancelled, terminated)."""


class DecisionRefused(AgentWorkerError):
    """Raised when the task refuses a decision: stale version, unknown or decided request, a
    principal not allowed, a bad signature, an edit the tool refuses. ``reason`` is the task's word."""

    def __init__(self, task_id: str, request_id: str, reason: str) -> None:
        super().__init__(f"task {task_id} refused the decision on {request_id}: {reason}")
        self.task_id = task_id
        self.request_id = request_id
        self.reason = reason


class WorkerUnreachable(AgentWorkerError):
    """Raised when no worker answered a query or an update in time. The task is not
    changed: an update that arrives later carries ``expires_at`` and the task refuses it.
    ``stage`` is ``read`` when ``submit``'s read went unanswered (nothing was signed or sent)."""

    stage: str = "send"


@dataclass(frozen=True)
class TaskRef:
    """A started (or already existing) task."""

    task_id: str
    run_id: str | None
    started: bool  # False when a task with this id already existed: it was not started again


@dataclass
class AwaitingTask:
    """A task waiting for a human, with the requests the caller may decide."""

    task_id: str
    tenant: str
    agent: str
    requests: list[ApprovalRequest] = field(default_factory=list)
    error: str | None = None  # its worker did not answer: only what visibility knows is shown
    approvers: list[str] = field(default_factory=list)  # from visibility: who may decide its requests
    phase: TaskPhase | None = None  # from the status query (None when its worker did not answer)
    prompt: str = ""  # the task's prompt, cut (from the status query)
    batch: list[BatchView] = field(default_factory=list)  # the model response's calls and results


def workflow_input(spec: TaskSpec | TaskInput | dict[str, Any]) -> dict[str, Any]:
    """The ``AgentTask`` input for ``spec`` as plain JSON, as ``start`` and each scheduled run send it
    (raises pydantic's ValidationError, naming the field, for an invalid spec)."""
    from agent_worker.schemas.tasks import CURRENT_RELEASE, TaskInput, TaskSpec

    task = spec if isinstance(spec, TaskInput) else TaskInput(spec=TaskSpec.model_validate(spec))
    if "release" not in task.model_fields_set:
        # The task begins on this release line (docs/upgrading.md); a TaskInput naming one keeps it.
        task = task.model_copy(update={"release": CURRENT_RELEASE})
    return task.model_dump(mode="json", exclude_none=True)


def _message(err: BaseException) -> str:
    cause = getattr(err, "cause", None) or err
    return getattr(cause, "message", None) or str(cause)


class AgentWorkerClient:
    """Starts tasks, reads them, and sends them decisions and input.

    Args:
        client: a connected Temporal client whose data converter the workers share (the pydantic
            converter, with encryption where the workers use it).
        task_queue: the workers' task queue (``agent-tasks`` by default).
    """

    def __init__(self, client: Client, task_queue: str = DEFAULT_TASK_QUEUE) -> None:
        self.temporal = client
        self.task_queue = task_queue

    @classmethod
    async def connect(
        cls, address: str | None = None, *, task_queue: str = DEFAULT_TASK_QUEUE, **overrides: Any
    ) -> AgentWorkerClient:
        """Connect as the SDK's environment configuration says (``TEMPORAL_ADDRESS``, profiles, TLS,
        API key), ``address`` first when given; encryption keys as the worker reads them."""
        from agent_worker.connection import connect

        return cls(await connect(target_host=address, **overrides), task_queue)

    def handle(self, task_id: str) -> WorkflowHandle[Any, TaskResult]:
        """The Temporal handle of a task (for what this client does not wrap)."""
        from agent_worker.schemas.tasks import TaskResult

        return self.temporal.get_workflow_handle(task_id, result_type=TaskResult)

    # ---- starting ------------------------------------------------------------------------------

    async def start(self, spec: TaskSpec | TaskInput | dict[str, Any], task_id: str | None = None) -> TaskRef:
        """Start a task, unless one with ``task_id`` exists (running or closed): the id is the task.
        It begins on the current release line (``TaskInput.release``, docs/upgrading.md) unless
        ``spec`` is a TaskInput that names one.

        Raises:
            pydantic.ValidationError: ``spec`` is not a valid TaskSpec (naming the field).
            InvalidPayload: ``task_id`` is not a valid task id (``schemas.tasks.TASK_ID_PATTERN``:
                no spaces, control characters or line breaks); nothing is started.
        """
        from agent_worker.schemas.tasks import TaskResult
        from agent_worker.schemas.validation import check_task_id

        task_id = check_task_id(task_id) if task_id is not None else f"task-{uuid.uuid4().hex[:12]}"
        payload = workflow_input(spec)
        try:
            handle = await self.temporal.start_workflow(
                WORKFLOW_TYPE,
                payload,
                id=task_id,
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                task_timeout=WORKFLOW_TASK_TIMEOUT,
                result_type=TaskResult,
            )
        except WorkflowAlreadyStartedError:
            return TaskRef(task_id, None, started=False)
        return TaskRef(task_id, handle.result_run_id, started=True)

    @property
    def schedules(self) -> TaskSchedules:
        """Tasks on a Temporal Schedule (``agent_worker.schedules``), each run started as ``start`` does."""
        from agent_worker.schedules import TaskSchedules

        return TaskSchedules(self.temporal, self.task_queue, workflow_input, WORKFLOW_TASK_TIMEOUT)

    # ---- reading -------------------------------------------------------------------------------

    async def status(self, task_id: str, *, wait_seconds: float = DEFAULT_TIMEOUT) -> TaskStatus:
        """The task's phase, pending requests, budgets, usage and latest events.

        Raises:
            TaskNotFound: no such task.
            WorkerUnreachable: no worker answered within ``wait_seconds`` seconds.
        """
        from agent_worker.schemas.tasks import TaskStatus

        return await self._query(task_id, STATUS_QUERY, TaskStatus, wait_seconds)

    async def pending(self, task_id: str, *, wait_seconds: float = DEFAULT_TIMEOUT) -> list[ApprovalRequest]:
        """The task's requests still waiting for a decision."""
        from agent_worker.schemas.approvals import ApprovalRequest

        return await self._query(task_id, PENDING_QUERY, list[ApprovalRequest], wait_seconds)

    async def _query(self, task_id: str, query: str, result_type: Any, wait_seconds: float) -> Any:
        handle = self.handle(task_id)
        try:
            return await asyncio.wait_for(
                handle.query(query, result_type=result_type, rpc_timeout=timedelta(seconds=wait_seconds)),
                wait_seconds,
            )
        except TimeoutError:
            raise self._unreachable(task_id, wait_seconds, "the query") from None
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise TaskNotFound(f"no task {task_id!r}") from None
            if err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise self._unreachable(task_id, wait_seconds, "the query") from None
            raise AgentWorkerError(f"cannot read task {task_id}: {err.message}") from None

    async def next_request(self, task_id: str, *, within: float = 60.0, poll: float = 0.2) -> ApprovalRequest:
        """Wait until the task has a pending request and return the oldest one.

        Raises:
            TaskEnded: the task reached a terminal phase first (the reason says why).
            AgentWorkerError: no request came within ``within`` seconds.
        """
        deadline = time.monotonic() + within
        polls = 0
        while True:
            # The task is asked (a query) only once its search attributes name an approver or it has
            # closed, and every few polls in case it set none: a query that reaches the worker while
            # a local activity of the task runs (its start's admission, its events' delivery) costs
            # the task a workflow task of its own.
            maybe, phase = await self._may_have_request(task_id)
            if maybe or (polls and polls % QUERY_EVERY_POLLS == 0):
                status = await self.status(task_id)
                if status.pending:
                    return status.pending[0]
                if status.phase.terminal:
                    raise TaskEnded(
                        f"task {task_id} ended {status.phase.value} with no request pending: {status.reason}"
                    )
                phase = status.phase.value
            if time.monotonic() > deadline:
                raise AgentWorkerError(
                    f"task {task_id} asked for no approval within {within:g} s (phase {phase})"
                )
            polls += 1
            await asyncio.sleep(poll)

    async def _may_have_request(self, task_id: str) -> tuple[bool, str]:
        """Whether visibility says the task names an approver, or has closed (True when it cannot
        be read: the query then says what is wrong), and the phase it shows."""
        try:
            description = await self.handle(task_id).describe()
        except RPCError:
            return True, "unknown"
        attributes = description.typed_search_attributes
        closed = description.status is not WorkflowExecutionStatus.RUNNING
        return closed or bool(attributes.get(visibility.APPROVERS)), attributes.get(
            visibility.PHASE
        ) or "unknown"

    async def awaiting(
        self, *, principal: str | None = None, tenant: str | None = None, wait_seconds: float = 5.0
    ) -> list[AwaitingTask]:
        """Every running task waiting for a human (from visibility), with its pending requests, those
        ``principal`` may decide when given. A task whose worker does not answer within ``wait_seconds``
        is still listed, with ``error`` set, so one dead worker cannot hide the others."""
        from agent_worker.schemas.tasks import TaskStatus

        query = visibility.AWAITING_QUERY
        if tenant is not None:
            if not queryable(tenant):
                raise ValueError(f"tenant {tenant!r} is not a valid tenant name")
            query += f" AND {visibility.TENANT.name} = '{tenant}'"
        if principal is not None and queryable(principal):
            query += f" AND {visibility.APPROVERS.name} = '{principal}'"
        executions = [
            e
            async for e in self.temporal.list_workflows(query)
            if principal is None or principal in (e.typed_search_attributes.get(visibility.APPROVERS) or [])
        ]
        answers = await asyncio.gather(
            *(self.status(e.id, wait_seconds=wait_seconds) for e in executions), return_exceptions=True
        )
        found = []
        for execution, answer in zip(executions, answers, strict=True):
            attributes = execution.typed_search_attributes
            entry = AwaitingTask(
                task_id=execution.id,
                tenant=attributes.get(visibility.TENANT) or "",
                agent=attributes.get(visibility.AGENT) or "",
                approvers=list(attributes.get(visibility.APPROVERS) or []),
            )
            if isinstance(answer, TaskStatus):
                entry.requests = [r for r in answer.pending if principal is None or principal in r.approvers]
                entry.phase = answer.phase
                entry.prompt, entry.batch = answer.prompt, answer.batch
                if not entry.requests:
                    continue  # decided since visibility last heard
            else:
                entry.error = f"no worker answered the status query ({answer})"
            found.append(entry)
        return found

    async def result(self, task_id: str) -> TaskResult:
        """Wait for the task to close and return its result (completed, rejected or handed off).

        Raises:
            TaskNotFound: no such task.
            TaskEnded: it failed, was cancelled or terminated, with no result.
        """
        try:
            return await self.handle(task_id).result()
        except WorkflowFailureError as err:
            raise TaskEnded(f"task {task_id} ended without a result: {_message(err)}") from None
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise TaskNotFound(f"no task {task_id!r}") from None
            raise AgentWorkerError(f"cannot read task {task_id}: {err.message}") from None

    # ---- deciding ------------------------------------------------------------------------------

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
            raise DecisionRefused(task_id, decision.request_id, _message(err)) from None
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise TaskNotFound(f"no running task {task_id!r}") from None
            raise AgentWorkerError(f"cannot reach task {task_id}: {err.message}") from None
        if not outcome.accepted:
            raise DecisionRefused(task_id, decision.request_id, outcome.detail)
        return outcome

    # ---- input and cancel ----------------------------------------------------------------------

    async def say(self, task_id: str, text: str, *, principal: str | None = None) -> None:
        """Queue follow-up input (signal ``add_input``); the agent's next turn sees it. Input the
        task cannot take is recorded as ignored, with why (event ``input.ignored``).

        Raises:
            TaskNotFound: no running task with that id.
        """
        payload: dict[str, Any] = {"text": text}
        if principal is not None:
            payload["principal"] = principal
        try:
            await self.handle(task_id).signal(INPUT_SIGNAL, payload)
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise TaskNotFound(f"no running task {task_id!r}") from None
            raise AgentWorkerError(f"cannot reach task {task_id}: {err.message}") from None

    add_input = say

    async def cancel(self, task_id: str) -> None:
        """Request cancellation; the task destroys its sandbox and lets a write in flight settle.

        Raises:
            TaskNotFound: no running task with that id.
        """
        try:
            await self.handle(task_id).cancel()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise TaskNotFound(f"no running task {task_id!r}") from None
            raise AgentWorkerError(f"cannot cancel {task_id}: {err.message}") from None

    # ---- forks (docs/forks.md) --------------------------------------------------------------------

    async def steps(
        self, task_id: str, *, history: str | Path | dict[str, Any] | None = None
    ) -> list[StepRecord]:
        """The task's steps (its turns), read from its history: what each proposed and what ran after.
        ``history``: from this exported history (a path or parsed JSON) instead of the cluster.

        Raises:
            ValueError: no task with that id, or not an exported history (``ForkRefused``).
        """
        from agent_worker.activities.task_history import load_exported, read_exported, read_history, steps_of

        if history is None:
            return steps_of(await read_history(self.temporal, task_id))
        exported = await asyncio.to_thread(load_exported, history)
        return steps_of(await read_exported(task_id, exported, self.temporal.data_converter))

    async def fork(
        self,
        task_id: str,
        *,
        at: int,
        prompt_edit: str | None = None,
        agent_version: str | None = None,
        model: str | None = None,
        replay_until: int | None = None,
        fork_id: str | None = None,
        history: str | Path | dict[str, Any] | None = None,
        store: ArtifactStore | None = None,
    ) -> TaskRef:
        """Start a fork of ``task_id`` at step ``at``: a new task with the original's state there
        (conversation, artifacts, spend, its sandbox rebuilt in a fresh one), which never repeats a
        business write the original committed. ``prompt_edit`` replaces the prompt, ``agent_version``
        the agent (a registration's name), ``model`` the agent's model (``TaskSpec.model``); steps
        before ``replay_until`` replay the original's turns.

        ``history``: read the original from this exported history (a file's path or its parsed JSON,
        one run as ``temporal workflow show -o json`` writes it) instead of the cluster; it is put in
        ``store`` (the artifact store the workers use, ``build_artifact_store(config)``) for the
        worker to read, and the fork starts on this client's task queue. ``task_id`` then names the
        original for the fork's evidence and events.

        Raises:
            ValueError: no such task or step, not an exported history, a history without ``store``,
                or a change this version cannot make (``ForkRefused``).
        """
        from agent_worker.activities.task_history import (
            fork_spec,
            load_exported,
            new_fork_id,
            read_exported,
            read_history,
        )

        history_ref = None
        if history is None:
            read = await read_history(self.temporal, task_id)
            # On the task queue the original ran on: its agent is served there.
            queue = read.task_queue or self.task_queue
        else:
            if store is None:
                raise ValueError("a fork from an exported history needs the workers' artifact store (store=)")
            exported = await asyncio.to_thread(load_exported, history)
            read = await read_exported(task_id, exported, self.temporal.data_converter)
            history_ref = await asyncio.to_thread(store.put_json, exported)
            queue = self.task_queue
        spec = fork_spec(
            read,
            at,
            prompt_edit=prompt_edit,
            agent_version=agent_version,
            model=model,
            replay_until=replay_until,
            history=history_ref,
        )
        starter = AgentWorkerClient(self.temporal, queue)
        return await starter.start(spec, fork_id or new_fork_id(task_id))

    def _unreachable(
        self, task_id: str, wait_seconds: float, what: str, *, decision: bool = False
    ) -> WorkerUnreachable:
        tail = (
            ""
            if not decision
            else "; the decision was not applied and the task refuses it if it arrives later"
        )
        return WorkerUnreachable(
            f"no worker answered {what} for task {task_id} within {wait_seconds:g} s (is a worker polling "
            f"task queue {self.task_queue!r}?){tail}"
        )
