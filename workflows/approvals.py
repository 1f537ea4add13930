"""Approval bookkeeping for one task: publishing requests, applying decisions, recording the ones
that are ignored and why. Workflow code: deterministic."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.authz import AuthzActivities
    from agent_worker.schemas.actions import BusinessWrite
    from agent_worker.schemas.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        ApprovalSla,
        DecisionKind,
        DecisionRecord,
        IgnoredDecision,
        Quorum,
    )
    from agent_worker.schemas.authz import AuthzRequest
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import BatchItem, PolicySpec
    from agent_worker.telemetry import metrics

from agent_worker.workflows import grants, options
from agent_worker.workflows.bounds import IGNORED_REASON_CHARS, KEPT_TEXT_CHARS, cut
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.decisions import expiry_problem, find_request, why_not
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.patches import (
    DECISION_EXPIRY_PATCH,
    MINIMUM_ROUND_TRIPS_PATCH,
    REAUTHORIZE_PATCH,
    REOPEN_WITHOUT_REVOKED_PATCH,
    patched,
)
from agent_worker.workflows.questions import SETTLE_WITHOUT_RUNNING
from agent_worker.workflows.quorum import count, progress

# Ignored decisions kept in the state (and shown by ``status``); the event sink has all of them.
IGNORED_KEPT = 100


class ApprovalDesk:
    """Requests and decisions of a task, kept in its state."""

    def __init__(self, task: TaskContext) -> None:
        self.task = task

    def request(
        self,
        item: BatchItem,
        approvers: list[str],
        sla: ApprovalSla | None = None,
        *,
        quorum: Quorum | None = None,
    ) -> None:
        """Publish an approval request for ``item`` to ``approvers``, with its deadline (the rule's
        ``sla``'s, when it sets one), its ``sla`` and its ``quorum`` (``workflows.quorum``). A remembered
        grant stands in for one approver, so it never settles an action that needs a quorum."""
        if quorum is None and grants.covered(self.task, item, approvers, sla):
            return  # a remembered grant approved it: nobody is asked
        task, state = self.task, self.task.state
        assert task.spec is not None
        state.request_seq += 1
        now = workflow.now()
        wait = task.spec.budgets.approval_timeout_seconds
        if sla is not None and sla.expire_after_seconds is not None:
            wait = sla.expire_after_seconds
        request = ApprovalRequest(
            request_id=f"req-{state.request_seq}",
            action=item.action,
            version=item.action.version,
            approvers=approvers,
            reason=item.policy_reason,
            requested_at=now,
            deadline=now + timedelta(seconds=wait),
            run_chain=state.run_chain,
            sla=sla,
            quorum=quorum,
        )
        if quorum is not None:
            request.progress = progress(request)
        item.request_id = request.request_id
        state.requests.append(request)
        metrics.workflow_counter("agent_worker_approvals_requested", tool=item.action.tool)
        self.task.emit(
            EventType.APPROVAL_REQUESTED,
            request_id=request.request_id,
            tool=item.action.tool,
            agent=item.action.agent,
            version=request.version,
            approvers=approvers,
            deadline=request.deadline.isoformat(),
        )

    async def reauthorize(self, item: BatchItem) -> bool:
        """Ask the authorizer, right before ``item`` runs, whether its approver still holds the
        permission. False when revoked: the request is open again (or the task hands off). A business
        write asks in its own activity instead, since the minimum of round trips (``write_authz``).
        An approve-and-remember's grant is stored first (``workflows.grants.save``)."""
        await grants.save(self.task, self.decision_for(item), item)
        request = self.authz_request(item)
        if request is None or (
            isinstance(item.action.operation, BusinessWrite) and patched(MINIMUM_ROUND_TRIPS_PATCH)
        ):
            return True
        answer = await workflow.execute_activity_method(
            AuthzActivities.check,
            request,
            **options.config(
                options.AUTHZ,
                summary=f"may {request.principal} still approve {item.action.tool}?",
                task_queue=options.business_queue(),
            ),
        )
        return self.authorization(item, answer.allowed, answer.reason)

    def write_authz(self, item: BatchItem) -> AuthzRequest | None:
        """What a business write checks in its own activity before it writes (``WriteInput.authz``),
        or None: nothing to check (not approved by a person, or checked already)."""
        if not patched(MINIMUM_ROUND_TRIPS_PATCH):
            return None
        return self.authz_request(item)

    def authz_request(self, item: BatchItem) -> AuthzRequest | None:
        """The authorizer's question for ``item``'s approval, or None when there is none to ask."""
        record = self.decision_for(item)
        if record is None or record.decision is DecisionKind.REJECT or item.authorized:
            return None
        if record.decision in SETTLE_WITHOUT_RUNNING:
            return None  # an answer or a respond runs nothing: there is no effect to guard
        # Tasks that started before re-authorization existed keep running as they began.
        if not patched(REAUTHORIZE_PATCH):
            return None
        task = self.task
        assert task.spec is not None
        return AuthzRequest(
            task_id=task.task_id,
            tenant=task.spec.tenant,
            principal=record.principal,
            tool=item.action.tool,
            version=record.version,
            effect=item.action.effect.value,
        )

    def authorization(self, item: BatchItem, allowed: bool, reason: str) -> bool:
        """Take the authorizer's answer for ``item``: True when it still holds; False when revoked,
        and the request is open again (or the task hands off, raising ``HandOff``)."""
        task = self.task
        record = self.decision_for(item)
        assert record is not None and task.spec is not None
        task.emit(
            EventType.AUTHZ_CHECKED,
            request_id=record.request_id,
            principal=record.principal,
            allowed=allowed,
            reason=reason,
        )
        if allowed:
            item.authorized = True
            return True
        record.revoked_at, record.revoked_reason = workflow.now(), reason
        task.emit(
            EventType.AUTHZ_REVOKED,
            request_id=record.request_id,
            principal=record.principal,
            reason=reason,
        )
        if task.spec.policy.on_revoked == "hand_off":
            raise HandOff(f"approval of {record.request_id} no longer holds: {reason}")
        request = find_request(task.state.requests, record.request_id)
        assert request is not None
        approvers = request.approvers
        if patched(REOPEN_WITHOUT_REVOKED_PATCH):
            # The revoked principal cannot decide again: asked again, it would approve again and the
            # request would re-open to it forever.
            approvers = [a for a in approvers if a != record.principal]
            if not approvers:
                raise HandOff(
                    f"approval of {record.request_id} no longer holds: {reason}; "
                    f"no approver other than {record.principal!r} is left to decide it"
                )
        if (
            request.quorum is not None
            and len([a for a in approvers if a != task.spec.started_by]) < request.quorum.required
        ):
            raise HandOff(
                f"approval of {record.request_id} no longer holds: {reason}; too few approvers are "
                f"left for its quorum of {request.quorum.required}"
            )
        self.request(item, approvers, request.sla, quorum=request.quorum)
        return False

    def expired(self, decision: ApprovalDecision) -> str | None:
        """Why ``decision`` comes too late (its sender stopped waiting for an answer), or None."""
        if decision.expires_at is None or not patched(DECISION_EXPIRY_PATCH):
            return None
        return expiry_problem(decision, workflow.now())

    def edit_refused(self, item: BatchItem, record: DecisionRecord, problem: str) -> None:
        """``record``'s edit cannot take effect (the tool refuses its arguments): say why, and put the
        action up for a decision again, to the same approvers."""
        record.refused_reason = problem
        self.task.emit(
            EventType.APPROVAL_IGNORED,
            request_id=record.request_id,
            principal=record.principal,
            decision=record.decision.value,
            via=record.via,
            reason=f"{problem}; the request is open again",
        )
        request = find_request(self.task.state.requests, record.request_id)
        assert request is not None
        self.request(item, request.approvers, request.sla, quorum=request.quorum)

    def decision_for(self, item: BatchItem) -> DecisionRecord | None:
        """The accepted decision on ``item``'s current request, if any."""
        if item.request_id is None:
            return None
        return next((d for d in self.task.state.decisions if d.request_id == item.request_id), None)

    def pending(self) -> list[ApprovalRequest]:
        """Requests still waiting for a decision."""
        return [r for r in self.task.state.requests if not r.decided]

    def _batch_item(self, request_id: str) -> BatchItem | None:
        return next((i for i in self.task.state.batch if i.request_id == request_id), None)

    def apply(self, decision: ApprovalDecision, via: str) -> str | None:
        """Apply a decision or record why it is ignored; returns that reason (None when applied)."""
        spec = self.task.spec
        # An update's expiry is checked by its validator, when the task receives it.
        expired = self.expired(decision) if via == "signal" else None
        reason = (
            self.task.input_error
            or expired
            or why_not(
                self.task.state.requests,
                decision,
                self.task.task_id,
                spec.policy if spec else PolicySpec(),
                self.task.state.run_chain,
                starter=spec.started_by if spec else None,
            )
            or grants.remember_problem(self.task, decision)
        )
        if reason is None and self._batch_item(decision.request_id) is None:
            reason = f"request {decision.request_id} no longer waits for a decision"
        if reason is not None:
            self.ignore(reason, via, decision)
            return reason
        request = find_request(self.task.state.requests, decision.request_id)
        assert request is not None and spec is not None
        record = DecisionRecord(
            request_id=request.request_id,
            tool=request.action.tool,
            decision=decision.decision,
            principal=decision.principal,
            version=decision.version,
            edited_args=decision.edited_args,
            reason=decision.reason,
            answer=decision.answer,
            via=via,
            decided_at=workflow.now(),
            agent=request.action.agent,
        )
        if request.quorum is not None and not count(request, record, spec.started_by):
            self.task.emit(
                EventType.APPROVAL_COUNTED,
                request_id=request.request_id,
                decision=decision.decision.value,
                principal=decision.principal,
                version=decision.version,
                via=via,
                progress=request.progress,
            )
            return None
        request.decided = True
        self.task.state.decisions.append(record)
        grants.noted(record, decision)
        metrics.workflow_counter(
            "agent_worker_approvals_decided", tool=record.tool, decision=record.decision.value
        )
        waited = (record.decided_at - request.requested_at).total_seconds()
        metrics.workflow_histogram("agent_worker_approval_wait_seconds", waited, tool=record.tool)
        self.task.emit(
            EventType.APPROVAL_DECIDED,
            request_id=request.request_id,
            decision=decision.decision.value,
            principal=decision.principal,
            version=decision.version,
            via=via,
            agent=request.action.agent,
        )
        return None

    def recorded(self, decision: ApprovalDecision) -> str:
        """What the ``decide`` update answers for an accepted ``decision`` (a quorum's progress)."""
        request = find_request(self.task.state.requests, decision.request_id)
        if request is None or request.quorum is None:
            return f"{decision.decision.value} recorded"
        state = "decided" if request.decided else "pending"
        return f"{decision.decision.value} recorded: {request.progress} ({state})"

    def ignore(
        self, reason: str, via: str, decision: ApprovalDecision | None = None, raw: Any = None
    ) -> None:
        """Record why a decision changed nothing. Bounded work and size whatever was sent: the
        strings kept are cut, the state keeps a tail of records and a count, and the event is held
        back (counted) in a flood (``TaskContext.emit_ignored``)."""
        if decision is None and isinstance(raw, dict):
            decision_fields = {k: raw.get(k) for k in ("request_id", "principal", "version", "decision")}
            fields = {
                k: cut(v, KEPT_TEXT_CHARS) if isinstance(v, str) else None for k, v in decision_fields.items()
            }
        elif decision is not None:
            fields = {
                "request_id": decision.request_id,
                "principal": decision.principal,
                "version": decision.version,
                "decision": decision.decision.value,
            }
        else:
            fields = {}
        reason = cut(reason, IGNORED_REASON_CHARS)
        state = self.task.state
        state.ignored.append(IgnoredDecision(reason=reason, via=via, received_at=workflow.now(), **fields))
        # The state keeps a tail, so a flood of bad signals cannot grow it.
        del state.ignored[:-IGNORED_KEPT]
        state.ignored_count += 1
        metrics.workflow_counter("agent_worker_approvals_ignored")
        self.task.emit_ignored(EventType.APPROVAL_IGNORED, reason=reason, via=via, **fields)
