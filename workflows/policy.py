"""The action policy: deterministic, evaluated in the workflow."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # payload models and helpers: one copy for all runs
    from schemas.actions import EffectClass, ProposedAction
    from schemas.approvals import ApprovalSla
    from schemas.tasks import PolicySpec, PolicyVerdict


@dataclass(frozen=True)
class PolicyDecision:
    """What the policy says about one action, and why."""

    verdict: PolicyVerdict
    approvers: tuple[str, ...]
    reason: str
    sla: ApprovalSla | None = None  # the matching rule's, for a request


def evaluate(policy: PolicySpec, action: ProposedAction) -> PolicyDecision:
    """The first rule matching the action's tool and effect wins; otherwise the defaults apply:
    sandbox commands are allowed, business writes need one of ``default_approvers`` (and are denied
    when nobody is configured to approve them)."""
    for index, rule in enumerate(policy.rules):
        if rule.tool not in (None, action.tool) or rule.effect not in (None, action.effect):
            continue
        reason = rule.reason or f"policy rule {index} ({rule.decision.value})"
        return PolicyDecision(rule.decision, tuple(rule.approvers), reason, rule.sla)
    if action.effect is EffectClass.SANDBOX:
        return PolicyDecision(PolicyVerdict.ALLOW, (), "sandbox commands are allowed by default")
    if action.effect is EffectClass.DELEGATE:
        # A sub-task applies this same policy to every effect it proposes.
        return PolicyDecision(PolicyVerdict.ALLOW, (), "delegation is allowed by default")
    if policy.default_approvers:
        return PolicyDecision(
            PolicyVerdict.REQUIRE_APPROVAL,
            tuple(policy.default_approvers),
            f"{action.effect.value} actions need approval by default",
        )
    return PolicyDecision(
        PolicyVerdict.DENY, (), f"no rule allows {action.tool} and no default approver is configured"
    )
