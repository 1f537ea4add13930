"""What the inbox asks Temporal, and what it sends back.

Every check that guards a decision lives here, so the HTTP layer cannot forget one:

- **Listing**: ``AgentWorkerClient.awaiting``: tasks come from visibility (``AgentAwaitingApproval``
  and ``AgentApprovers``), and each task's pending requests from its status query. A principal sees
  only the requests that name them as an approver.
- **Viewing a task**: allowed to the approvers its policy names (any rule's ``approvers`` and
  ``default_approvers``) and to the approvers of its pending requests. The policy comes from the
  task's start input in history, so a closed task stays visible to its approvers without a worker.
- **Deciding**: a form is parsed once into a typed ``agent_worker.decisions.Decision`` (the HTTP
  API builds one from its body) and goes through ``AgentWorkerClient.submit``, the one decision path:
  one read (the task's status query), where the request must be pending and name the principal, then
  the update ``decide`` (the workflow checks everything again and answers synchronously): two RPCs.
  Where the policy registers the principal's key, or requires signatures, the inbox signs with the
  principal's private key from its keys directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_worker.schemas.actions import ProposedAction
from agent_worker.schemas.approvals import ApprovalDecision, ApprovalRequest, DecisionKind, DecisionOutcome
from agent_worker.schemas.tasks import PolicySpec, TaskResult, TaskSpec, TaskStatus
from agent_worker.schemas.validation import InvalidPayload, parse_task_input
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from agent_worker.client import (
    AgentWorkerClient,
    AgentWorkerError,
    AwaitingTask,
    DecisionRefused,
    TaskNotFound,
    WorkerUnreachable,
)
from agent_worker.decisions import Decision, InvalidDecision

if TYPE_CHECKING:
    from agent_worker.activities.artifacts import ArtifactStore
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

QUERY_TIMEOUT = timedelta(seconds=5)
# How long a decision waits for a worker's answer; it expires then (``ApprovalDecision.expires_at``).
DECIDE_TIMEOUT = timedelta(seconds=30)
PREVIEW_BYTES = 64 * 1024


class InboxError(Exception):
    """A request the inbox refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


InboxEntry = AwaitingTask
"""A task in a principal's inbox, with the requests that principal may decide."""


@dataclass
class ArtifactPreview:
    """An artifact an action refers to, as far as the inbox can show it."""

    digest: str
    text: str | None = None
    size: int | None = None
    truncated: bool = False
    problem: str | None = None


@dataclass
class TaskView:
    """A task as one approver may see it."""

    task_id: str
    running: bool
    status: TaskStatus | None = None
    result: TaskResult | None = None
    closed_as: str | None = None  # the execution status when the result cannot be read
    decidable: list[ApprovalRequest] = field(default_factory=list)
    others_pending: int = 0
    problem: str | None = None


def may_view(policy: PolicySpec, principal: str) -> bool:
    """Whether ``principal`` is one of the approvers the task's policy names."""
    approvers = {a for rule in policy.rules for a in rule.approvers} | set(policy.default_approvers)
    return principal in approvers


class InboxService:
    """The inbox's view of the Temporal cluster.

    Args:
        client: a connected client (its data converter decodes the task payloads).
        keys_dir: where principals' Ed25519 private keys live (``<principal>.key``).
        artifact_dir: a local artifact store's directory to read previews from (the embedded
            default), or None when not reachable here.
        artifact_store: the artifact store to read previews from (``build_artifact_store(config)``);
            it takes precedence over ``artifact_dir``.
    """

    def __init__(
        self,
        client: Client,
        keys_dir: Path,
        artifact_dir: Path | None = None,
        artifact_store: ArtifactStore | None = None,
    ) -> None:
        self.client = client
        self.tasks = AgentWorkerClient(client)
        self.keys_dir = keys_dir
        if artifact_store is None and artifact_dir is not None:
            from agent_worker.activities.artifacts import LocalArtifactStore

            artifact_store = LocalArtifactStore(artifact_dir)
        self.artifact_store = artifact_store

    # ---- reading ---------------------------------------------------------------------------------

    async def inbox(self, principal: str) -> list[InboxEntry]:
        """Every running task with a request ``principal`` may decide."""
        return await self.tasks.awaiting(principal=principal, wait_seconds=QUERY_TIMEOUT.total_seconds())

    async def task(self, task_id: str, principal: str) -> TaskView:
        """The task as ``principal`` may see it.

        Raises:
            InboxError: (404) no such task, or one ``principal`` may not see (the same answer, so
                the inbox does not tell strangers which task ids exist).
        """
        handle = self.client.get_workflow_handle(task_id, result_type=TaskResult)
        not_found = InboxError(f"no task {task_id!r} among the tasks {principal!r} may see", 404)
        try:
            description = await handle.describe(rpc_timeout=QUERY_TIMEOUT)
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                raise not_found from None
            raise
        policy = await self.policy(handle)
        running = description.status is WorkflowExecutionStatus.RUNNING
        view = TaskView(task_id=task_id, running=running)
        if running:
            try:
                view.status = await self._status(handle)
            except Exception as err:  # a dead worker: say so rather than fail the page
                view.problem = f"its worker did not answer the status query ({err})"
        if view.status is not None:
            view.decidable = [r for r in view.status.pending if principal in r.approvers]
            view.others_pending = len(view.status.pending) - len(view.decidable)
        if not view.decidable and (policy is None or not may_view(policy, principal)):
            raise not_found
        if not running:
            try:
                view.result = await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
            except WorkflowFailureError as err:
                view.closed_as = description.status.name.lower() if description.status else "closed"
                view.problem = str(err.cause or err)
            except RPCError as err:
                view.problem = f"its result cannot be read: {err.message}"
        return view

    async def policy(self, handle: WorkflowHandle[Any, Any]) -> PolicySpec | None:
        """The task's policy, from the start event of its latest run (None when it cannot be read).

        Read each time rather than cached by task id: a closed task's id may be reused by a new
        task with another policy.
        """
        spec = await self.spec(handle)
        return spec.policy if spec is not None else None

    async def spec(self, handle: WorkflowHandle[Any, Any]) -> TaskSpec | None:
        """The task's spec, from the start event of its latest run (None when it cannot be read)."""
        async for event in handle.fetch_history_events(page_size=1, rpc_timeout=QUERY_TIMEOUT):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            if not payloads:
                return None
            [raw] = await self.client.data_converter.decode(list(payloads)[:1])
            try:
                return parse_task_input(raw).spec
            except InvalidPayload:
                return None  # the task itself failed on this input; nobody can approve anything
        return None

    def previews(self, action: ProposedAction) -> list[ArtifactPreview]:
        """The artifacts an action refers to, read from the artifact store when it is reachable."""
        digests = list(getattr(action.operation, "artifacts", []))
        return [self._preview(d) for d in digests]

    def _preview(self, digest: str) -> ArtifactPreview:
        from agent_worker.activities.artifacts import LocalArtifactStore
        from agent_worker.activities.errors import ArtifactError

        store = self.artifact_store
        if store is None or (isinstance(store, LocalArtifactStore) and not store.root.is_dir()):
            where = store.root if isinstance(store, LocalArtifactStore) else "(none configured)"
            return ArtifactPreview(digest, problem=f"the artifact store is not reachable here: {where}")
        try:
            data = store.get(digest)
        except ArtifactError as err:
            return ArtifactPreview(digest, problem=str(err))
        try:
            text = data[:PREVIEW_BYTES].decode("utf-8")
        except UnicodeDecodeError:
            return ArtifactPreview(digest, size=len(data), problem="binary content; no preview")
        return ArtifactPreview(digest, text=text, size=len(data), truncated=len(data) > PREVIEW_BYTES)

    async def _status(self, handle: WorkflowHandle[Any, Any]) -> TaskStatus:
        return await handle.query(AgentTaskWorkflow.status, rpc_timeout=QUERY_TIMEOUT)

    # ---- deciding --------------------------------------------------------------------------------

    async def decide(self, task_id: str, principal: str, form: dict[str, str]) -> DecisionOutcome:
        """Check and send ``principal``'s decision from a submitted form (``decision_from_form``).

        Raises:
            InboxError: as ``submit``, and 400 for a malformed form from a principal who may decide
                the request (403 for anyone else: the access check comes first).
        """
        try:
            decision = decision_from_form(principal, form)
        except InboxError:
            await self._may_decide(task_id, principal, form.get("request_id", ""))
            raise
        return await self.submit(task_id, decision)

    async def _may_decide(self, task_id: str, principal: str, request_id: str) -> None:
        """Refuse (403) unless ``principal`` is an approver of the task's pending ``request_id``.

        Raises:
            InboxError: (403) they are not, the request is not pending, or the task cannot be read.
        """
        try:
            status = await self.tasks.status(task_id, wait_seconds=QUERY_TIMEOUT.total_seconds())
        except AgentWorkerError:
            status = None
        pending = status.pending if status is not None else []
        if not any(r.request_id == request_id and principal in r.approvers for r in pending):
            raise forbidden(principal, request_id, task_id)

    async def submit(
        self,
        task_id: str,
        decision: Decision,
        *,
        visible_in: Callable[[str], bool] | None = None,
    ) -> DecisionOutcome:
        """Check and send ``decision`` through ``AgentWorkerClient.submit``: one read (the task's
        status: its pending request, tenant and signing policy) and the update, whose validator checks
        everything again. Where the policy registers the principal's key, or requires signatures,
        the inbox signs with the principal's private key from its keys directory.

        ``visible_in`` (the API's tenant rule) hides a task of another tenant, and a task the
        principal may not see, as 404 (the API's answer for a task it does not show).

        Raises:
            InboxError: 403 when the principal may not decide that request (checked before anything
                is sent; 404 with ``visible_in`` when they may not see the task at all), 400 for a
                decision that cannot be built, 409 when the request is no longer pending or signing
                is required and no key is usable, 503/504 when the task or its worker cannot be reached.
        """
        principal, request_id = decision.principal, decision.request_id
        handle = self.client.get_workflow_handle(task_id)
        refused = forbidden(principal, request_id, task_id)
        hidden = InboxError(f"no task {task_id!r} among the tasks {principal!r} may see", 404)
        seen: list[TaskStatus] = []

        async def check(status: TaskStatus, request: ApprovalRequest | None) -> None:
            seen.append(status)
            if visible_in is not None and not visible_in(status.tenant):
                raise hidden
            if request is not None and principal in request.approvers:
                needs_reason(decision.kind, decision.reason)  # the form's rule, the API's too
                return
            # Refused: only now is the policy read, to say which refusal the principal may hear.
            policy = await self.policy(handle)
            viewer = policy is not None and may_view(policy, principal)
            if visible_in is not None and not viewer:
                if not any(principal in r.approvers for r in status.pending):
                    raise hidden
            if request is None and viewer:
                raise InboxError(
                    f"request {request_id!r} of {task_id} is not pending (already decided?)", 409
                )
            raise refused

        wait = DECIDE_TIMEOUT.total_seconds()
        try:
            outcome = await self.tasks.submit(
                task_id,
                decision,
                signer=self._signer,
                check=check,
                wait_seconds=wait,
                read_seconds=QUERY_TIMEOUT.total_seconds(),
            )
        except InvalidDecision as err:
            raise InboxError(str(err), 400) from None
        except DecisionRefused as err:
            detail = f"the task refused the decision: {err.reason}"
            phase = seen[0].phase.value if seen else "unknown"
            return DecisionOutcome(request_id=request_id, accepted=False, phase=phase, detail=detail)
        except TaskNotFound as err:
            if seen:  # it closed between the read and the update
                raise InboxError(f"task {task_id} cannot be reached: {err}", 503) from None
            raise (hidden if visible_in is not None else refused) from None
        except WorkerUnreachable as err:
            if err.stage == "read":
                raise InboxError(f"task {task_id} cannot be reached: {err}", 503) from None
            raise InboxError(
                f"no worker answered for task {task_id} within {wait:g} s; the decision was not applied "
                "and will not be: decide again once a worker runs",
                504,
            ) from None
        except AgentWorkerError as err:
            raise InboxError(f"task {task_id} cannot be reached: {err}", 503) from None
        assert outcome is not None  # an update always answers
        return outcome

    def _signer(self, status: TaskStatus, decision: ApprovalDecision) -> Ed25519PrivateKey | None:
        """The key to sign with when the policy requires signatures or registers the principal's key
        (the client signs over the request's run chain, so the signature holds for this run only)."""
        if not status.require_signatures and decision.principal not in status.signers:
            return None
        from agent_worker.security.signing import load_private_key

        try:
            return load_private_key(decision.principal, self.keys_dir)
        except (OSError, ValueError) as err:
            if status.require_signatures:
                raise InboxError(
                    f"this task requires signed decisions and the inbox has no usable key for "
                    f"{decision.principal!r} in {self.keys_dir}: {err}",
                    409,
                ) from None
            return None


def forbidden(principal: str, request_id: str, task_id: str) -> InboxError:
    """The refusal (403) of a decision ``principal`` may not make."""
    return InboxError(f"principal {principal!r} may not decide request {request_id!r} of {task_id!r}", 403)


def needs_reason(kind: str, reason: str | None) -> None:
    """Refuse a rejection or a respond with no reason (the agent reads it).

    Raises:
        InboxError: (400) it has none.
    """
    if kind == DecisionKind.REJECT.value and not reason:
        raise InboxError("a rejection needs a reason: the agent sees it", 400)
    if kind == DecisionKind.RESPOND.value and not reason:
        raise InboxError("a respond needs a message: the agent reads it instead of the result", 400)


def decision_from_form(principal: str, form: dict[str, str]) -> Decision:
    """The typed decision a form submits: ``request_id``, ``version``, ``decision`` (approve / edit /
    reject / respond / answer), and as needed ``reason``, ``edited_args`` (the whole argument object
    as JSON; only changed arguments are sent), ``remember`` (a JSON object, or the remember fields
    of ``inbox.grants``, with an approve) and ``answer`` (text; JSON for a form question).

    Raises:
        InboxError: (400) JSON that does not parse (a missing reason is refused by ``submit``, once
            the principal is known to be allowed).
    """
    kind = form.get("decision", "")
    reason = form.get("reason", "").strip() or None
    edited = edited_object(form.get("edited_args", "")) if kind == DecisionKind.EDIT.value else None
    remember = None
    if form.get("remember"):
        remember = remembered(form["remember"])
    elif kind == DecisionKind.APPROVE.value:
        from agent_worker.inbox.grants import remember_from_form

        remember = remember_from_form(form)
    return Decision(
        request_id=form.get("request_id", ""),
        kind=kind,
        principal=principal,
        version=form.get("version", ""),
        reason=reason,
        edited_args=edited,
        edit_given="whole",
        answer=form.get("answer", "") if kind == DecisionKind.ANSWER.value else None,
        answer_typed=True,
        remember=remember,
    )


def remembered(text: str) -> dict[str, Any]:
    """A form's ``remember`` (a JSON object: ``scope``, ``when``, ``until``; the decision's model
    checks each).

    Raises:
        InboxError: (400) not a JSON object.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InboxError(f"remember is not valid JSON ({err.msg})", 400) from None
    if not isinstance(value, dict):
        raise InboxError("remember must be a JSON object", 400)
    return value


def edited_object(text: str) -> dict[str, Any]:
    """A form's edited arguments: the whole argument object, as JSON.

    Raises:
        InboxError: (400) not a JSON object.
    """
    try:
        submitted = json.loads(text)
    except json.JSONDecodeError as err:
        raise InboxError(
            f"edited arguments are not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})", 400
        ) from None
    if not isinstance(submitted, dict):
        raise InboxError("edited arguments must be a JSON object", 400)
    return submitted
