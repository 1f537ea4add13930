"""What a candidate policy would have decided about recorded actions, beside what the running one did.

Pure functions over ``cli.recorded_actions``: each recorded action is put to the task's own policy
(the one its history carries: workers have no policy of their own) and to the candidate, both through
``workflows.policy.evaluate`` with the arguments the workflow passes it (the task's agent, tenant and
labels; the action's tool, arguments, effect class and calling agent). That function is the
workflow's policy evaluation itself, CEL conditions included, and it is deterministic, so the
"recorded" column is what the worker decided and the "candidate" column what a worker would decide
under the new policy. Nothing here calls a model, a tool, a store or Temporal.

A history whose recorded outcome contradicts the recomputed decision (the action was denied and the
policy now allows it, or the reverse) was written by code that decided differently; such an action is
counted as ``inconsistent`` rather than silently trusted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from agent_worker.cli.recorded_actions import RecordedAction, RecordedRun
from agent_worker.schemas.actions import ActionStatus
from agent_worker.schemas.tasks import PolicySpec, PolicyVerdict, TaskSpec
from agent_worker.workflows.policy import PolicyDecision, evaluate
from agent_worker.workflows.questions import route

# A change of approvers only (both decisions ask for approval, by different people), and a deny whose
# reason (what the model reads) changed.
APPROVERS_CHANGED = "approvers changed"
REASON_CHANGED = "deny reason changed"
VERDICTS = tuple(v.value for v in PolicyVerdict)
_REASON_WIDTH = 60

__all__ = ["APPROVERS_CHANGED", "REASON_CHANGED", "ActionDiff", "Decision", "Simulation", "simulate"]


@dataclass(frozen=True)
class Decision:
    """One policy's decision about one action: the verdict, who approves, and why."""

    verdict: str
    approvers: tuple[str, ...]
    reason: str

    @classmethod
    def of(cls, decision: PolicyDecision) -> Decision:
        return cls(decision.verdict.value, decision.approvers, decision.reason)

    def label(self) -> str:
        """``allow``, ``require_approval by a, b``, or ``deny: REASON`` (what the model would read)."""
        if self.verdict == PolicyVerdict.REQUIRE_APPROVAL.value:
            return f"{self.verdict} by {', '.join(self.approvers)}"
        if self.verdict == PolicyVerdict.DENY.value:
            reason = (
                self.reason if len(self.reason) <= _REASON_WIDTH else self.reason[: _REASON_WIDTH - 3] + "..."
            )
            return f"deny: {reason}"
        return self.verdict

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "approvers": list(self.approvers), "reason": self.reason}


@dataclass(frozen=True)
class ActionDiff:
    """One recorded action: where it was proposed, what the running policy decided, what became of
    it, and what the candidate policy would decide."""

    workflow_id: str
    run_id: str
    turn: int
    call_id: str
    tool: str
    effect: str
    arguments: dict[str, Any]
    caller: str
    agent: str
    tenant: str
    labels: dict[str, str]
    outcome: str
    recorded: Decision
    candidate: Decision
    inconsistent: bool = False

    @property
    def change(self) -> str | None:
        """The kind of change (``allow -> deny``, ``approvers changed``, ...), or None."""
        old, new = self.recorded, self.candidate
        if old.verdict != new.verdict:
            return f"{old.verdict} -> {new.verdict}"
        if old.verdict == PolicyVerdict.REQUIRE_APPROVAL.value and set(old.approvers) != set(new.approvers):
            return APPROVERS_CHANGED
        if old.verdict == PolicyVerdict.DENY.value and old.reason != new.reason:
            return REASON_CHANGED
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "turn": self.turn,
            "call_id": self.call_id,
            "tool": self.tool,
            "effect": self.effect,
            "arguments": self.arguments,
            "caller": self.caller,
            "agent": self.agent,
            "tenant": self.tenant,
            "labels": self.labels,
            "outcome": self.outcome,
            "recorded": self.recorded.to_json(),
            "candidate": self.candidate.to_json(),
            "change": self.change,
            "inconsistent": self.inconsistent,
        }


@dataclass
class Simulation:
    """Every action's diff, the runs read, and the runs skipped (with why)."""

    actions: list[ActionDiff]
    runs: int
    skipped: list[tuple[str, str, str]]  # (workflow id, run id, why)

    @property
    def changed(self) -> list[ActionDiff]:
        return [a for a in self.actions if a.change is not None]

    def by_kind(self) -> dict[str, int]:
        """Changed actions counted by kind of change, most frequent first."""
        return dict(Counter(a.change for a in self.changed if a.change).most_common())

    def matrix(self) -> dict[str, dict[str, int]]:
        """Actions counted by recorded verdict, then candidate verdict."""
        table = {old: dict.fromkeys(VERDICTS, 0) for old in VERDICTS}
        for action in self.actions:
            table[action.recorded.verdict][action.candidate.verdict] += 1
        return table

    def summary(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "skipped": len(self.skipped),
            "actions": len(self.actions),
            "changed": len(self.changed),
            "inconsistent": sum(a.inconsistent for a in self.actions),
            "by_kind": self.by_kind(),
            "matrix": self.matrix(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "actions": [a.to_json() for a in self.actions],
            "skipped": [{"workflow_id": w, "run_id": r, "reason": why} for w, r, why in self.skipped],
        }


def simulate(candidate: PolicySpec, runs: list[RecordedRun]) -> Simulation:
    """Each action of ``runs`` under its task's own policy and under ``candidate``."""
    result = Simulation(actions=[], runs=0, skipped=[])
    for run in runs:
        if run.skipped is not None or run.spec is None:
            result.skipped.append((run.workflow_id, run.run_id, run.skipped or "no task input"))
            continue
        result.runs += 1
        for recorded in run.actions:
            result.actions.append(_diff(run, run.spec, recorded, candidate))
    return result


def decide(policy: PolicySpec, spec: TaskSpec, recorded: RecordedAction) -> Decision:
    """``policy``'s decision about the action, evaluated as the workflow evaluates it
    (``workflows.turns``: the task's agent, tenant and labels; a question routed to a person)."""
    decision = evaluate(policy, recorded.action, agent=spec.agent, tenant=spec.tenant, labels=spec.labels)
    return Decision.of(route(decision, recorded.action, policy))  # a question always goes to a person


def _diff(run: RecordedRun, spec: TaskSpec, recorded: RecordedAction, candidate: PolicySpec) -> ActionDiff:
    action = recorded.action
    before = decide(spec.policy, spec, recorded)
    denied = recorded.outcome == ActionStatus.DENIED.value
    # An action the policy denies never runs and is reported denied; one it lets through is never.
    inconsistent = recorded.outcome != "undecided" and denied != (before.verdict == PolicyVerdict.DENY.value)
    return ActionDiff(
        workflow_id=run.workflow_id,
        run_id=run.run_id,
        turn=recorded.turn,
        call_id=action.call_id,
        tool=action.tool,
        effect=action.effect.value,
        arguments=action.arguments,
        caller=action.agent,
        agent=spec.agent,
        tenant=spec.tenant,
        labels=dict(spec.labels),
        outcome=recorded.outcome,
        recorded=before,
        candidate=decide(candidate, spec, recorded),
        inconsistent=inconsistent,
    )
