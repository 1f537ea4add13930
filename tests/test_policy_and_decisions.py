"""The policy and the decision checks, pure logic: the first matching rule wins, conditions pick
rules and fail closed, defaults apply when no rule matches, and each ignored decision says why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from agent_worker.schemas.actions import (
    BusinessWrite,
    EffectClass,
    ProposedAction,
    SandboxCommand,
    action_version,
)
from agent_worker.schemas.approvals import ApprovalDecision, ApprovalRequest
from agent_worker.schemas.conditions import compile_condition
from agent_worker.schemas.tasks import PolicyRule, PolicySpec, PolicyVerdict
from agent_worker.workflows.decisions import why_not
from agent_worker.workflows.policy import evaluate
from pydantic import ValidationError

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


def _written(amount: Any, **context: Any) -> Any:
    """The decision on a ``pay`` write of ``amount`` under an allow-small / ask-finance policy."""
    policy = PolicySpec(
        rules=[
            PolicyRule(tool="pay", when="args.amount <= 1000", decision=PolicyVerdict.ALLOW),
            PolicyRule(tool="pay", decision=PolicyVerdict.REQUIRE_APPROVAL, approvers=["finance"]),
        ]
    )
    return evaluate(policy, _action("pay", EffectClass.WRITE, amount=amount), **context)


def test_a_condition_on_an_argument_picks_the_rule() -> None:
    """``args.amount <= 1000`` allows 50 and passes 5000 on to the next rule, which asks finance."""
    assert _written(50).verdict is PolicyVerdict.ALLOW
    large = _written(5000)
    assert (large.verdict, large.approvers) == (PolicyVerdict.REQUIRE_APPROVAL, ("finance",))


def test_conditions_see_the_agent_the_tenant_the_labels_and_the_path() -> None:
    """A condition over the task's agent, tenant and labels and a path prefix matches only when all
    hold."""
    rule = PolicyRule(
        effect=EffectClass.WRITE,
        when='agent == "clerk" && tenant == "acme" && labels.env == "prod" '
        '&& args.path.startsWith("reports/")',
        decision=PolicyVerdict.DENY,
        reason="prod reports are read-only",
    )
    policy = PolicySpec(rules=[rule], default_approvers=["lead"])
    context = {"agent": "clerk", "tenant": "acme", "labels": {"env": "prod"}}
    hit = evaluate(policy, _action("save", EffectClass.WRITE, path="reports/q3.csv"), **context)
    assert (hit.verdict, hit.reason) == (PolicyVerdict.DENY, "prod reports are read-only")
    report = _action("save", EffectClass.WRITE, path="reports/q3.csv")
    for changed in ({"tenant": "other"}, {"labels": {"env": "dev"}}, {"agent": "boss"}):
        miss = evaluate(policy, report, **{**context, **changed})
        assert miss.verdict is PolicyVerdict.REQUIRE_APPROVAL, changed
    elsewhere = evaluate(policy, _action("save", EffectClass.WRITE, path="notes/a.txt"), **context)
    assert elsewhere.verdict is PolicyVerdict.REQUIRE_APPROVAL


def test_a_condition_that_errors_fails_closed_and_says_why() -> None:
    """A string amount (a type mismatch) or a missing argument never allows: the action goes to a
    person (the policy's default approvers), or is denied when nobody is configured, with a reason
    naming the rule and the error, the same in every process (no object addresses)."""
    mismatch = _written("5000")  # the allow rule has no approvers and the policy none: denied
    assert mismatch.verdict is PolicyVerdict.DENY and "no matching overload" in mismatch.reason
    small = PolicyRule(tool="pay", when="args.amount <= 1000", decision=PolicyVerdict.ALLOW)
    policy = PolicySpec(rules=[small])
    missing = evaluate(policy, _action("pay", EffectClass.WRITE, total=5))
    assert missing.verdict is PolicyVerdict.DENY
    assert missing.reason.startswith("policy rule 0: its condition could not be evaluated (")
    assert "amount" in missing.reason and "0x" not in missing.reason
    asked = evaluate(
        policy.model_copy(update={"default_approvers": ["lead"]}), _action("pay", EffectClass.WRITE, total=5)
    )
    assert (asked.verdict, asked.approvers) == (PolicyVerdict.REQUIRE_APPROVAL, ("lead",))


@pytest.mark.parametrize(
    ("when", "words"),
    [
        ("args.amount >", "does not parse"),
        ("arg.amount > 1", "undeclared reference to 'arg'"),
        ("now() > timestamp('2026-01-01T00:00:00Z')", "undeclared reference to 'now'"),
    ],
)
def test_a_bad_condition_is_refused_naming_the_rule(when: str, words: str) -> None:
    """A syntax error, an unknown name or a clock function refuses the policy, naming the rule's
    index and the problem."""
    rules = [{"decision": "allow", "tool": "x"}, {"decision": "allow", "when": when}]
    with pytest.raises(ValidationError) as refused:
        PolicySpec.model_validate({"rules": rules})
    [error] = refused.value.errors()
    assert error["loc"] == ("rules", 1) and words in error["msg"]


def test_compiled_conditions_are_cached_per_expression() -> None:
    """The same expression string compiles once: every later rule and evaluation reuses the program."""
    assert compile_condition("args.n > 1") is compile_condition("args.n > 1")
