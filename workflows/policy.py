"""The action policy: deterministic, evaluated in the workflow.

A rule matches an action when its ``tool`` and ``effect`` (each optional) match and its ``when``
condition (optional, CEL: ``schemas.conditions``) holds. A condition that cannot be evaluated for the
action (a missing argument, a type mismatch) fails closed: the action needs approval by the rule's
approvers, or else the policy's ``default_approvers``, and is denied when there are neither; the
reason, recorded in the ``policy.decided`` event and the action's evidence, names the rule and the
error. Falling through to the next rule instead would let an erroring deny rule allow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # payload models and helpers: one copy for all runs
    from agent_worker.schemas.actions import EffectClass, ProposedAction
    from agent_worker.schemas.approvals import ApprovalSla, Quorum
    from agent_worker.schemas.conditions import ConditionError, evaluate_condition
    from agent_worker.schemas.tasks import PolicySpec, PolicyVerdict


@dataclass(frozen=True)
class PolicyDecision:
    """What the policy says about one action, and why."""

    verdict: PolicyVerdict
    approvers: tuple[str, ...]
    reason: str
    sla: ApprovalSla | None = None  # the matching rule's, for a request
    quorum: Quorum | None = None  # the matching rule's: M distinct approvers (``workflows.quorum``)


def evaluate(
    policy: PolicySpec,
    action: ProposedAction,
    *,
    agent: str = "",
    tenant: str = "",
    labels: Mapping[str, str] | None = None,
) -> PolicyDecision:
    """The first rule matching the action's tool, effect and condition wins; otherwise the defaults
    apply: sandbox commands are allowed, business writes need one of ``default_approvers`` (and are
    denied when nobody is configured to approve them). ``agent``, ``tenant`` and ``labels`` are the
    task's, for conditions."""
    for index, rule in enumerate(policy.rules):
        if rule.tool not in (None, action.tool) or rule.effect not in (None, action.effect):
            continue
        if rule.when is not None:
            holds = evaluate_condition(
                rule.when,
                args=action.arguments,
                tool=action.tool,
                effect=action.effect.value,
                agent=agent,
                caller=action.agent,
                tenant=tenant,
                labels=labels or {},
            )
            if isinstance(holds, ConditionError):
                return _fail_closed(policy, index, rule.approvers, holds, rule.quorum)
            if not holds:
                continue
        reason = rule.reason or f"policy rule {index} ({rule.decision.value})"
        return PolicyDecision(rule.decision, tuple(rule.approvers), reason, rule.sla, rule.quorum)
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


def _fail_closed(
    policy: PolicySpec,
    index: int,
    approvers: list[str],
    error: ConditionError,
    quorum: Quorum | None = None,
) -> PolicyDecision:
    """A rule whose condition could not be evaluated: a person decides (the rule's quorum of its
    approvers, when it has one), or nobody allows it."""
    why = f"policy rule {index}: its condition could not be evaluated ({error})"
    chosen = tuple(approvers or policy.default_approvers)
    if chosen:
        return PolicyDecision(
            PolicyVerdict.REQUIRE_APPROVAL,
            chosen,
            f"{why}; approval required",
            quorum=quorum if approvers else None,
        )
    return PolicyDecision(PolicyVerdict.DENY, (), f"{why}; denied, no approver is configured")
