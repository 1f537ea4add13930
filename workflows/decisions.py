"""Checking an approval decision against the task's requests: one function for the signal, the
update's validator and the update handler, so all three agree."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # payload models and helpers: one copy for all runs
    from agent_worker.schemas.approvals import ApprovalDecision, ApprovalRequest, DecisionKind
    from agent_worker.schemas.tasks import PolicySpec
    from agent_worker.security.signing import signature_problem

from agent_worker.workflows import quorum
from agent_worker.workflows.questions import decision_problem


def find_request(requests: Iterable[ApprovalRequest], request_id: str) -> ApprovalRequest | None:
    """The request with ``request_id``, or None."""
    return next((r for r in requests if r.request_id == request_id), None)


def expiry_problem(decision: ApprovalDecision, now: datetime) -> str | None:
    """Why ``decision`` comes too late at ``now`` (past its ``expires_at``), or None."""
    if decision.expires_at is None or now <= decision.expires_at:
        return None
    return (
        f"the decision expired at {decision.expires_at.isoformat()} before the task received it "
        "(its sender stopped waiting for an answer); send it again"
    )


def why_not(
    requests: Iterable[ApprovalRequest],
    decision: ApprovalDecision,
    task_id: str,
    policy: PolicySpec,
    run_chain: str | None = None,
    *,
    starter: str | None = None,
) -> str | None:
    """Why ``decision`` must be ignored, or None when it may be applied. A signature must cover
    ``run_chain`` (the task's, None for tasks started before run chains). A quorum request also
    refuses what its quorum does not count, such as ``starter``'s approval (``workflows.quorum``)."""
    request = find_request(requests, decision.request_id)
    if request is None:
        return f"unknown request {decision.request_id!r}"
    if request.decided:
        return f"request {request.request_id} is already decided"
    if decision.version != request.version:
        return (
            f"stale version: the decision is for {decision.version[:19]}..., "
            f"request {request.request_id} is at {request.version[:19]}..."
        )
    if decision.principal not in request.approvers:
        return (
            f"principal {decision.principal!r} may not decide request {request.request_id} "
            f"(allowed: {', '.join(request.approvers)})"
        )
    problem = decision_problem(request, decision)  # questions and respond (``workflows.questions``)
    if problem is not None:
        return problem
    if decision.decision is DecisionKind.EDIT:
        assert decision.edited_args is not None
        unknown = sorted(set(decision.edited_args) - set(request.action.arguments))
        if unknown:
            return f"edited_args names arguments the action does not have: {', '.join(unknown)}"
    return signature_problem(
        task_id, decision, policy.signers.get(decision.principal), policy.require_signatures, run_chain
    ) or quorum.problem(request, decision, starter)
