"""Quorum and separation of duties: a request whose rule sets ``quorum`` is decided by ``required``
distinct approvers, none of them the task's starter. Workflow code: deterministic.

Each vote is an ordinary decision, checked like any other first (``workflows.decisions.why_not``:
version, approver, signature, expiry); then ``problem`` refuses what a quorum does not count (the
starter's approval, a second decision by the same principal, an edit, which would change what the
others approved), and ``count`` records it on the request. The request stays pending, with its
deadline, reminders and escalation (``workflows.sla``), until enough approvals settle it, or a
rejection does: at once with ``veto`` (the default), else once the approvers left could no longer make
up the quorum. Only the settling decision becomes the task's ``DecisionRecord``, carrying every vote.

Gated on the rule's ``quorum`` field: runs without it, and every run begun before it existed, never
reach this module, so no ``workflow.patched`` id is needed.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # payload models: one copy for all runs
    from agent_worker.schemas.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        DecisionKind,
        DecisionRecord,
        Vote,
    )


def problem(request: ApprovalRequest, decision: ApprovalDecision, starter: str | None) -> str | None:
    """Why ``decision``, otherwise valid, does not count toward ``request``'s quorum, or None (also
    when the request has no quorum)."""
    if request.quorum is None:
        return None
    if decision.decision is DecisionKind.EDIT:
        return (
            f"request {request.request_id} needs a quorum: approve or reject it; an edit would change "
            "what the other approvers approve"
        )
    if decision.decision is DecisionKind.RESPOND:
        return (
            f"request {request.request_id} needs a quorum: approve or reject it; one approver cannot "
            "answer for the others"
        )
    if decision.decision is DecisionKind.APPROVE and starter is not None and decision.principal == starter:
        return (
            f"principal {decision.principal!r} started this task: their approval does not count toward "
            f"the quorum of request {request.request_id} (separation of duties); {progress(request)}"
        )
    earlier = next((v for v in request.votes if v.principal == decision.principal), None)
    if earlier is not None:
        return (
            f"principal {decision.principal!r} already decided request {request.request_id} "
            f"({earlier.decision.value}); each approver counts once; {progress(request)}"
        )
    return None


def count(request: ApprovalRequest, record: DecisionRecord, starter: str | None) -> bool:
    """Record ``record`` (an accepted decision on ``request``) as a vote; True when it settles the
    request: then ``record`` carries every vote and is the request's decision."""
    assert request.quorum is not None
    request.votes.append(
        Vote(
            principal=record.principal,
            decision=record.decision,
            version=record.version,
            via=record.via,
            decided_at=record.decided_at,
            reason=record.reason,
        )
    )
    request.progress = progress(request)
    approvals = _approvers(request)
    if record.decision is DecisionKind.REJECT:
        undecided = [
            a for a in request.approvers if a != starter and a not in {v.principal for v in request.votes}
        ]
        settled = request.quorum.veto or len(approvals) + len(undecided) < request.quorum.required
    else:
        settled = len(approvals) >= request.quorum.required
    if settled:
        record.votes = list(request.votes)
    return settled


def progress(request: ApprovalRequest) -> str:
    """``request``'s quorum so far, for people: '1 of 2 approvals: alice' (and its rejections)."""
    assert request.quorum is not None
    approvals = _approvers(request)
    text = f"{len(approvals)} of {request.quorum.required} approvals"
    if approvals:
        text += f": {', '.join(approvals)}"
    rejections = [v.principal for v in request.votes if v.decision is DecisionKind.REJECT]
    if rejections:
        text += f"; rejected by {', '.join(rejections)}"
    return text


def _approvers(request: ApprovalRequest) -> list[str]:
    return [v.principal for v in request.votes if v.decision is DecisionKind.APPROVE]


__all__ = ["count", "problem", "progress"]
