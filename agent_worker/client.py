"""The client side of the task protocol, in one place.

Every name the ``AgentTask`` workflow answers to (its type, the queries ``status`` and
``pending_approvals``, the update ``decide``, the signals ``submit_decision`` and ``add_input``) is
spelled once, in ``schemas.visibility``, and exported here (``tests/test_protocol_names.py`` checks
them against the names the workflow declares), with the type each answer decodes to; every payload
goes out as plain JSON (``model_dump(mode="json")``), as any other client would send. The client is
this module with its two parts, the decision path (``client_decisions``) and forks
(``client_forks``). None imports workflow, agent, sandbox or store code (``tests/test_light_client.py``):
a process that only starts and decides tasks stays light.

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
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent_worker.client_decisions import DEFAULT_TIMEOUT, DecisionPath
from agent_worker.client_forks import ForkCalls
from agent_worker.client_types import AwaitingTask, TaskRef
from agent_worker.errors import (
    AgentWorkerError,
    DecisionRefused,
    TaskEnded,
    TaskNotFound,
    WorkerUnreachable,
    cause_message,
)
from agent_worker.schemas import visibility
from agent_worker.schemas.visibility import (
    DECISION_SIGNAL,
    DECISION_UPDATE,
    DEFAULT_TASK_QUEUE,
    INPUT_SIGNAL,
    PENDING_QUERY,
    STATUS_QUERY,
    TASKS_QUERY,
    WORKFLOW_TYPE,
    queryable,
)

if TYPE_CHECKING:
    from agent_worker.schedules import TaskSchedules
    from agent_worker.schemas.approvals import ApprovalRequest
    from agent_worker.schemas.tasks import TaskInput, TaskResult, TaskSpec, TaskStatus

__all__ = [
    "DECISION_SIGNAL",
    "DECISION_UPDATE",
    "DEFAULT_TIMEOUT",
    "INPUT_SIGNAL",
    "PENDING_QUERY",
    "TASKS_QUERY",
    "WORKFLOW_TYPE",
    "AgentWorkerClient",
    "AgentWorkerError",
    "AwaitingTask",
    "DecisionRefused",
    "TaskEnded",
    "TaskNotFound",
    "TaskRef",
    "WorkerUnreachable",
    "workflow_input",
]

# The payload models are imported where a call first needs them, not with this module: building the
# pydantic models costs about as much as importing the Temporal client, and a process that imports the
# client without calling it yet (a CLI printing ``--help``, an app wiring itself up) need not pay it.
# The first call builds them, once.

# ``next_request`` asks the task itself every this many polls, whatever its search attributes say.
QUERY_EVERY_POLLS = 10
# The workflow task timeout a task starts with (Temporal's default is 10 s; continue-as-new keeps it).
# A worker that lost a task's cache (a restart, a flood of signals that outran it) replays the whole
# history in one workflow task, and a long history of signals takes seconds to decode in the SDK
# (about 1 ms a signal here). At 10 s that replay can time out on every attempt, and the task would
# never take another step; 60 s covers a 10,000-signal history on a busy 2-core worker. Other
# clients set the same: ``temporal workflow start --task-timeout 60s``.
WORKFLOW_TASK_TIMEOUT = timedelta(seconds=60)


def workflow_input(spec: TaskSpec | TaskInput | dict[str, Any]) -> dict[str, Any]:
    """The ``AgentTask`` input for ``spec`` as plain JSON, as ``start`` and each scheduled run send it
    (raises pydantic's ValidationError, naming the field, for an invalid spec)."""
    from agent_worker.schemas.tasks import CURRENT_RELEASE, TaskInput, TaskSpec

    task = spec if isinstance(spec, TaskInput) else TaskInput(spec=TaskSpec.model_validate(spec))
    if "release" not in task.model_fields_set:
        # The task begins on this release line (docs/upgrading.md); a TaskInput naming one keeps it.
        task = task.model_copy(update={"release": CURRENT_RELEASE})
    return task.model_dump(mode="json", exclude_none=True)


class AgentWorkerClient(DecisionPath, ForkCalls):
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
            raise TaskEnded(f"task {task_id} ended without a result: {cause_message(err)}") from None
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise TaskNotFound(f"no task {task_id!r}") from None
            raise AgentWorkerError(f"cannot read task {task_id}: {err.message}") from None

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
