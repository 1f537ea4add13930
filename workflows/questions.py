"""Questions the agent asks (``ask_human``) and the ``respond`` decision, in the workflow.

A question is a proposed action whose operation is a ``Question``: the policy routes it (its
approvers are who may answer), ``ApprovalDesk`` publishes it as a request and the task waits for it
as for any approval (durably, with its deadline, reminders and escalation). These hooks are where a
question differs from an action:

- ``route``: a question always goes to a person; a rule that would allow it sends it to the policy's
  ``default_approvers`` (denied when there are none: nobody could answer).
- ``decision_problem``: a question takes ``answer`` (checked against its type: a refused answer
  names the failing field and the question stays open) or ``reject`` (declined; the model reads the
  reason); an action takes ``respond`` besides approve, edit and reject, never ``answer``.
- ``settled``: the result the model reads, without running anything: the answer, or the
  approver's message for ``respond``.

Nothing here runs for a task that never calls ``ask_human`` nor receives a ``respond``: no patch
is needed, every older history replays unchanged. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.actions import ActionResult, ActionStatus, BudgetRaise, ProposedAction
    from agent_worker.schemas.approvals import ApprovalDecision, ApprovalRequest, DecisionKind, DecisionRecord
    from agent_worker.schemas.questions import Question, answer_problem, answer_text
    from agent_worker.schemas.tasks import PolicySpec, PolicyVerdict

from agent_worker.workflows.policy import PolicyDecision

# Decisions that run nothing: the authorizer is not asked again before their result is taken.
SETTLE_WITHOUT_RUNNING = frozenset({DecisionKind.ANSWER, DecisionKind.RESPOND})


def is_question(action: ProposedAction) -> bool:
    """Whether ``action`` is a question for a person (an ``ask_human`` call)."""
    return isinstance(action.operation, Question)


def route(decision: PolicyDecision, action: ProposedAction, policy: PolicySpec) -> PolicyDecision:
    """``decision`` for a question: a person must answer it, so an ``allow`` goes to the policy's
    default approvers (or is denied, naming why). Any other action's decision is unchanged."""
    if not is_question(action) or decision.verdict is not PolicyVerdict.ALLOW:
        return decision
    if policy.default_approvers:
        return PolicyDecision(
            PolicyVerdict.REQUIRE_APPROVAL,
            tuple(policy.default_approvers),
            f"{decision.reason}; a question is answered by the default approvers",
        )
    return PolicyDecision(
        PolicyVerdict.DENY,
        (),
        "nobody may answer the question: give a rule on ask_human its approvers, or set default_approvers",
    )


def decision_problem(request: ApprovalRequest, decision: ApprovalDecision) -> str | None:
    """Why ``decision`` does not fit ``request`` (a question, or an action), or None."""
    operation = request.action.operation
    if isinstance(operation, Question):
        if decision.decision is DecisionKind.ANSWER:
            problem = answer_problem(operation, decision.answer)
            return f"request {request.request_id} refuses the answer: {problem}" if problem else None
        if decision.decision is DecisionKind.REJECT:
            return None  # declined: the model reads the reason
        return (
            f"request {request.request_id} is a question: answer it (decision 'answer') "
            "or decline it (decision 'reject')"
        )
    if decision.decision is DecisionKind.ANSWER:
        return f"request {request.request_id} is an action, not a question: approve, edit, reject or respond"
    if decision.decision is DecisionKind.RESPOND and isinstance(operation, BudgetRaise):
        return f"request {request.request_id} is the task's budget extension: approve, edit or reject it"
    return None


def settled(action: ProposedAction, record: DecisionRecord | None) -> ActionResult | None:
    """The result of ``action`` decided by ``record`` when nothing runs for it (an answered
    question, a respond), or None: it runs."""
    if record is not None and record.decision is DecisionKind.RESPOND:
        output = f"not run: {record.principal} responded instead: {record.reason}"
        return ActionResult(
            call_id=action.call_id, tool=action.tool, status=ActionStatus.RESPONDED, output=output
        )
    if not isinstance(action.operation, Question):
        return None
    if record is not None and record.decision is DecisionKind.ANSWER:
        output = answer_text(action.operation, record.answer)
        return ActionResult(
            call_id=action.call_id, tool=action.tool, status=ActionStatus.ANSWERED, output=output
        )
    # Not reached (a question is answered, declined, or expires before it settles); never run as a write.
    return ActionResult(
        call_id=action.call_id, tool=action.tool, status=ActionStatus.FAILED, output="error: nobody answered"
    )
