"""The policy and the decision checks, pure logic: the first matching rule wins, defaults when no
rule matches, and each ignored decision says why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.actions import BusinessWrite, EffectClass, ProposedAction, SandboxCommand, action_version
from schemas.approvals import ApprovalDecision, ApprovalRequest
from schemas.tasks import PolicyRule, PolicySpec, PolicyVerdict
from workflows.decisions import why_not
from workflows.policy import evaluate

DIGEST = "sha256:" + "ab" * 32


def _action(tool: str, effect: EffectClass, **arguments: Any) -> ProposedAction:
    sandbox = effect is EffectClass.SANDBOX
    operation = (
        SandboxCommand(argv=["true"]) if sandbox else BusinessWrite(record_type="r", payload=arguments)
    )
    fields = {"tool": tool, "effect": effect, "arguments": arguments, "operation": operation}
    return ProposedAction(call_id="call-1", version=action_version(tool, arguments, operation), **fields)


def test_policy_first_matching_rule_wins() -> None:
    """Of several matching rules the first decides, and its reason is reported."""
    policy = PolicySpec(
        rules=[
            PolicyRule(tool="submit_report", decision=PolicyVerdict.ALLOW, reason="trusted"),
            PolicyRule(effect=EffectClass.WRITE, decision=PolicyVerdict.DENY),
        ]
    )
    decision = evaluate(policy, _action("submit_report", EffectClass.WRITE))
    assert (decision.verdict, decision.reason) == (PolicyVerdict.ALLOW, "trusted")
    other = evaluate(policy, _action("delete_all", EffectClass.WRITE))
    assert (other.verdict, other.reason) == (PolicyVerdict.DENY, "policy rule 1 (deny)")


def test_policy_rules_match_tool_and_effect_together() -> None:
    """A rule naming a tool and an effect matches only actions with both; others fall through."""
    narrow = PolicyRule(tool="run_python", effect=EffectClass.WRITE, decision=PolicyVerdict.DENY)
    broad = PolicyRule(effect=EffectClass.SANDBOX, decision=PolicyVerdict.REQUIRE_APPROVAL, approvers=["ops"])
    policy = PolicySpec(rules=[narrow, broad])
    decision = evaluate(policy, _action("run_python", EffectClass.SANDBOX))
    assert (decision.verdict, decision.approvers) == (PolicyVerdict.REQUIRE_APPROVAL, ("ops",))


def test_policy_defaults() -> None:
    """With no rule: sandbox commands are allowed, writes need a default approver or are denied."""
    write = _action("submit_report", EffectClass.WRITE)
    assert evaluate(PolicySpec(), _action("run_python", EffectClass.SANDBOX)).verdict is PolicyVerdict.ALLOW
    approval = evaluate(PolicySpec(default_approvers=["lead", "cfo"]), write)
    assert (approval.verdict, approval.approvers) == (PolicyVerdict.REQUIRE_APPROVAL, ("lead", "cfo"))
    denied = evaluate(PolicySpec(), write)
    assert (denied.verdict, denied.approvers) == (PolicyVerdict.DENY, ())
    assert "no default approver" in denied.reason


def _request() -> ApprovalRequest:
    action = _action("submit_report", EffectClass.WRITE, month="2026-10", total="10")
    now = datetime(2026, 11, 1, tzinfo=UTC)
    times = {"requested_at": now, "deadline": now + timedelta(days=3)}
    return ApprovalRequest(
        request_id="req-1", action=action, version=action.version, approvers=["lead"], **times
    )


def _decision(request: ApprovalRequest, **changes: Any) -> ApprovalDecision:
    fields = {"request_id": "req-1", "version": request.version, "decision": "approve", "principal": "lead"}
    return ApprovalDecision.model_validate({**fields, **changes})


def test_why_not_explains_each_ignored_decision() -> None:
    """Unknown request, already decided, stale version, wrong principal and unknown edited
    arguments are each refused with their own reason."""
    request = _request()
    cases = [
        ([request], _decision(request, request_id="req-9"), "unknown request 'req-9'"),
        ([request.model_copy(update={"decided": True})], _decision(request), "already decided"),
        ([request], _decision(request, version=DIGEST), "stale version"),
        ([request], _decision(request, principal="intern"), "principal 'intern' may not decide"),
        ([request], _decision(request, decision="edit", edited_args={"bonus": "1"}), "have: bonus"),
    ]
    for requests, decision, words in cases:
        reason = why_not(requests, decision, "t", PolicySpec())
        assert reason is not None and words in reason, (decision, reason)


def test_why_not_accepts_valid_decisions() -> None:
    """A current decision by an allowed principal, including an edit of known arguments, applies."""
    request = _request()
    assert why_not([request], _decision(request), "t", PolicySpec()) is None
    assert why_not([request], _decision(request, decision="reject", reason="no"), "t", PolicySpec()) is None
    assert (
        why_not([request], _decision(request, decision="edit", edited_args={"total": "9"}), "t", PolicySpec())
        is None
    )
