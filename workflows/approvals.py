"""Approval bookkeeping for one task: publishing requests, applying decisions, recording the ones
that are ignored and why. Workflow code: deterministic."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from schemas.approvals import ApprovalDecision, ApprovalRequest, DecisionRecord, IgnoredDecision
    from schemas.events import EventType
    from schemas.tasks import BatchItem
    from workflows.decisions import find_request, why_not

if TYPE_CHECKING:
    from workflows.agent_task import AgentTaskWorkflow


class ApprovalDesk:
    """Requests and decisions of an ``AgentTaskWorkflow``, kept in its state."""

    def __init__(self, task: AgentTaskWorkflow) -> None:
        self.task = task

    def request(self, item: BatchItem, approvers: list[str]) -> None:
        """Publish an approval request for ``item`` to ``approvers``, with its deadline."""
        task, state = self.task, self.task.state
        assert task.spec is not None
        state.request_seq += 1
        now = workflow.now()
        request = ApprovalRequest(
            request_id=f"req-{state.request_seq}",
            action=item.action,
            version=item.action.version,
            approvers=approvers,
            reason=item.policy_reason,
            requested_at=now,
            deadline=now + timedelta(seconds=task.spec.budgets.approval_timeout_seconds),
        )
        item.request_id = request.request_id
        state.requests.append(request)
        self.task.emit(
            EventType.APPROVAL_REQUESTED,
            request_id=request.request_id,
            tool=item.action.tool,
            version=request.version,
            approvers=approvers,
            deadline=request.deadline.isoformat(),
        )

    def pending(self) -> list[ApprovalRequest]:
        """Requests still waiting for a decision."""
        return [r for r in self.task.state.requests if not r.decided]

    def _batch_item(self, request_id: str) -> BatchItem | None:
        return next((i for i in self.task.state.batch if i.request_id == request_id), None)

    def apply(self, decision: ApprovalDecision, via: str) -> str | None:
        """Apply a decision or record why it is ignored; returns that reason (None when applied)."""
        reason = self.task.input_error or why_not(self.task.state.requests, decision)
        if reason is None and self._batch_item(decision.request_id) is None:
            reason = f"request {decision.request_id} no longer waits for a decision"
        if reason is not None:
            self.ignore(reason, via, decision)
            return reason
        request = find_request(self.task.state.requests, decision.request_id)
        assert request is not None
        request.decided = True
        record = DecisionRecord(
            request_id=request.request_id,
            tool=request.action.tool,
            decision=decision.decision,
            principal=decision.principal,
            version=decision.version,
            edited_args=decision.edited_args,
            reason=decision.reason,
            via=via,
            decided_at=workflow.now(),
        )
        self.task.state.decisions.append(record)
        self.task.emit(
            EventType.APPROVAL_DECIDED,
            request_id=request.request_id,
            decision=decision.decision.value,
            principal=decision.principal,
            version=decision.version,
            via=via,
        )
        return None

    def ignore(
        self, reason: str, via: str, decision: ApprovalDecision | None = None, raw: Any = None
    ) -> None:
        if decision is None and isinstance(raw, dict):
            decision_fields = {k: raw.get(k) for k in ("request_id", "principal", "version", "decision")}
            fields = {k: v if isinstance(v, str) else None for k, v in decision_fields.items()}
        elif decision is not None:
            fields = {
                "request_id": decision.request_id,
                "principal": decision.principal,
                "version": decision.version,
                "decision": decision.decision.value,
            }
        else:
            fields = {}
        self.task.state.ignored.append(
            IgnoredDecision(reason=reason, via=via, received_at=workflow.now(), **fields)
        )
        self.task.emit(EventType.APPROVAL_IGNORED, reason=reason, via=via, **fields)
