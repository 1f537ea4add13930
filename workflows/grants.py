"""Remembered grants in a task: an approver's approve-and-remember stored, and a stored grant used
where an action would otherwise wait for a person. Workflow code: deterministic.

Only tasks whose policy has ``grants`` do any of this (a field that only new runs have, so no
history recorded before grants changes): their turns look grants up (``TurnInput.grants``: the
turn's activity finds, for each action it proposes, the first grant that answers it, and voids in
the store the grants whose basis changed), and their approvers may add ``remember`` to an approve.

- **Use** (``covered``, the first thing ``ApprovalDesk.request`` asks): the grant the turn found is
  checked again here against the task's own policy (its digest, the rule's approvers, the signature
  when the policy requires one), the tool's schema and the clock. If it holds, the action is
  approved by it: a request already decided and a ``DecisionRecord`` with ``via="grant"`` and its
  ``grant_id`` (the action's evidence), and a ``grant.used`` event; nobody is asked. Its principal's
  permission is checked again before the action runs, as for a person's approval.
- **Remember** (``remember_problem`` in the decision's checks; ``save`` before the approved action
  runs, from ``ApprovalDesk.reauthorize``): the accepted decision's ``remember`` becomes a ``Grant``
  bound to the action's basis and the policy's digest, stored by ``grants.save`` (idempotent: its id
  derives from the decision), and a ``grant.created`` event.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.grants import GrantActivities
    from agent_worker.schemas.actions import BudgetRaise
    from agent_worker.schemas.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        ApprovalSla,
        DecisionKind,
        DecisionRecord,
    )
    from agent_worker.schemas.conditions import ConditionError, evaluate_condition
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.grants import Grant, GrantQuery, grant_id_for, policy_digest
    from agent_worker.schemas.tasks import BatchItem
    from agent_worker.security.signing import signature_problem

from agent_worker.workflows import options
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.decisions import find_request


def query_for(task: TaskContext) -> GrantQuery | None:
    """The turn's grant lookup for ``task`` (``TurnInput.grants``): None unless its policy allows
    grants."""
    spec = task.valid_spec
    if spec.policy.grants is None:
        return None
    return GrantQuery(
        tenant=spec.tenant,
        agent=spec.agent,
        thread=spec.thread,
        labels=spec.labels,
        policy=policy_digest(spec.policy),
    )


def remember_problem(task: TaskContext, decision: ApprovalDecision) -> str | None:
    """Why ``decision``'s ``remember`` cannot be honoured (the decision is then refused whole), or
    None (also when it has none)."""
    remember = decision.remember
    if remember is None or task.spec is None:
        return None
    grants = task.spec.policy.grants
    if grants is None:
        return "this task's policy allows no remembered grants (policy.grants); approve without remember"
    request = find_request(task.state.requests, decision.request_id)
    if request is None:
        return None  # the decision's own checks name it
    if isinstance(request.action.operation, BudgetRaise):
        return "a budget extension cannot be remembered"
    if request.quorum is not None:
        return "a vote toward a quorum cannot be remembered: a grant stands in for one approver"
    if request.action.basis is None:
        return "this action was proposed by a worker that records no tool schema; approve without remember"
    if remember.scope == "thread" and task.spec.thread is None:
        return "remember scope 'thread': this task is on no thread"
    now = workflow.now()
    if remember.until is not None and remember.until <= now:
        return f"remember until {remember.until.isoformat()} is already past"
    if grants.max_seconds is not None:
        latest = now + timedelta(seconds=grants.max_seconds)
        if remember.until is None or remember.until > latest:
            return (
                f"this policy's grants last at most {grants.max_seconds} s: give remember.until "
                f"no later than {latest.isoformat()}"
            )
    return None


def covered(task: TaskContext, item: BatchItem, approvers: list[str], sla: ApprovalSla | None) -> bool:
    """Approve ``item`` by the grant its turn found, when that grant holds up; whether it did. The
    grants found void are reported either way."""
    spec = task.spec
    if spec is None or spec.policy.grants is None:
        return False
    action = item.action
    for voided in action.voided_grants:
        grant_id, _, why = voided.partition(": ")
        task.emit(
            EventType.GRANT_VOIDED, grant_id=grant_id, tool=action.tool, call_id=action.call_id, reason=why
        )
    grant = action.grant
    if grant is None:
        return False
    problem = _refusal(task, grant, item, approvers)
    if problem is not None:
        task.emit(EventType.GRANT_REFUSED, grant_id=grant.grant_id, call_id=action.call_id, reason=problem)
        return False
    state = task.state
    state.request_seq += 1
    now = workflow.now()
    request = ApprovalRequest(
        request_id=f"req-{state.request_seq}",
        action=action,
        version=action.version,
        approvers=approvers,
        reason=item.policy_reason,
        requested_at=now,
        deadline=now,
        run_chain=state.run_chain,
        sla=sla,
        decided=True,
    )
    item.request_id = request.request_id
    state.requests.append(request)
    state.decisions.append(
        DecisionRecord(
            request_id=request.request_id,
            tool=action.tool,
            decision=DecisionKind.APPROVE,
            principal=grant.principal,
            version=action.version,
            reason=f"remembered grant {grant.grant_id}",
            via="grant",
            decided_at=now,
            agent=action.agent,
            grant_id=grant.grant_id,
        )
    )
    task.emit(
        EventType.GRANT_USED,
        grant_id=grant.grant_id,
        request_id=request.request_id,
        call_id=action.call_id,
        tool=action.tool,
        principal=grant.principal,
        version=action.version,
    )
    return True


def _refusal(task: TaskContext, grant: Grant, item: BatchItem, approvers: list[str]) -> str | None:
    """Why the task does not take ``grant`` for ``item`` (the turn found it; the task checks it by
    its own policy and clock), or None."""
    spec, action = task.valid_spec, item.action
    if grant.tenant != spec.tenant or grant.tool != action.tool:
        return "it is for another tenant or tool"
    if grant.policy != policy_digest(spec.policy):
        return "it was given under another policy"
    if action.basis is None or grant.tool_schema != action.basis.tool_schema:
        return "it was given for another schema of the tool"
    if grant.expires_at is not None and grant.expires_at <= workflow.now():
        return f"it expired at {grant.expires_at.isoformat()}"
    if grant.principal not in approvers:
        return f"its principal {grant.principal!r} is not among this action's approvers"
    if grant.remember.when is not None:
        holds = evaluate_condition(
            grant.remember.when,
            args=action.arguments,
            tool=action.tool,
            effect=action.effect.value,
            agent=spec.agent,
            caller=action.agent,
            tenant=spec.tenant,
            labels=spec.labels,
        )
        if holds is not True:
            return (
                f"its condition does not hold ({holds})"
                if isinstance(holds, ConditionError)
                else ("its condition does not hold")
            )
    return signature_problem(
        grant.task_id,
        _decision_of(grant),
        spec.policy.signers.get(grant.principal),
        spec.policy.require_signatures,
        grant.run_chain,
    )


def _decision_of(grant: Grant) -> ApprovalDecision:
    """The decision ``grant`` came from, as its signature covers it."""
    return ApprovalDecision(
        request_id=grant.request_id,
        version=grant.version,
        decision=DecisionKind.APPROVE,
        principal=grant.principal,
        reason=grant.reason,
        signature=grant.signature,
        remember=grant.remember,
    )


def noted(record: DecisionRecord, decision: ApprovalDecision) -> None:
    """Keep an accepted decision's ``remember`` (and the signature that covers it) in its record, for
    ``save``."""
    if decision.remember is not None:
        record.remember = decision.remember
        record.signature = decision.signature


def grant_of(task: TaskContext, record: DecisionRecord, item: BatchItem) -> Grant:
    """The grant ``record``'s remember stores, for ``item``'s action."""
    spec, action = task.valid_spec, item.action
    assert record.remember is not None and action.basis is not None
    return Grant(
        grant_id=grant_id_for(task.task_id, task.state.run_chain, record.request_id),
        principal=record.principal,
        tenant=spec.tenant,
        tool=action.tool,
        agent=spec.agent,
        thread=spec.thread,
        remember=record.remember,
        tool_schema=action.basis.tool_schema,
        policy=policy_digest(spec.policy),
        agent_version=action.basis.agent_version,
        task_id=task.task_id,
        run_chain=task.state.run_chain,
        request_id=record.request_id,
        version=record.version,
        reason=record.reason,
        signature=record.signature,
        created_at=record.decided_at,
    )


async def save(task: TaskContext, record: DecisionRecord | None, item: BatchItem) -> None:
    """Store the grant an accepted approve-and-remember asked for, once (``grants.save``)."""
    if record is None or record.remember is None or record.remembered_as is not None:
        return
    grant = grant_of(task, record, item)
    try:
        await workflow.execute_activity_method(
            GrantActivities.save,
            grant,
            **options.config(
                options.GRANTS, summary=f"remember {grant.principal}'s approval of {grant.tool}"
            ),
        )
    except ActivityError as err:
        # The approval itself stands; only the remembering failed (the state store stayed down).
        task.emit(
            EventType.GRANT_REFUSED,
            grant_id=grant.grant_id,
            request_id=record.request_id,
            reason=f"not stored: {err.cause or err}",
        )
        return
    record.remembered_as = grant.grant_id
    task.emit(
        EventType.GRANT_CREATED,
        grant_id=grant.grant_id,
        request_id=record.request_id,
        principal=grant.principal,
        tool=grant.tool,
        scope=grant.remember.scope,
        when=grant.remember.when,
        until=grant.expires_at.isoformat() if grant.expires_at else None,
    )


__all__ = ["covered", "grant_of", "noted", "query_for", "remember_problem", "save"]
