"""The task: what a client asks for (``TaskSpec``), what the workflow carries (``TaskState``), and what
it reports (``TaskStatus``, ``TaskResult``).

``TaskInput{spec, state}`` is the workflow input so that continue-as-new carries the state. Clients
send ``{"spec": {...}}`` or the bare spec; both are accepted.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from agent_worker.schemas.actions import ActionResult, ActionStatus, EffectClass, ProposedAction
from agent_worker.schemas.approvals import (
    MAX_PRINCIPAL_CHARS,
    ApprovalRequest,
    ApprovalSla,
    DecisionRecord,
    IgnoredDecision,
    Quorum,
)
from agent_worker.schemas.artifacts import ArtifactRef, InputFile
from agent_worker.schemas.conditions import MAX_CONDITION_CHARS, ConditionError, compile_condition
from agent_worker.schemas.digests import DIGEST_PATTERN
from agent_worker.schemas.events import Event
from agent_worker.schemas.forks import ForkOrigin, ForkSpec, ForkState
from agent_worker.schemas.grants import GrantPolicy
from agent_worker.schemas.sandbox import CommandRecord, SandboxRef, SandboxSpec
from agent_worker.schemas.tools import ToolEffectRecord
from agent_worker.schemas.turns import ToolCallRecord
from agent_worker.schemas.writes import WriteEvidence
from pydantic import BaseModel, ConfigDict, Field, model_validator

# A task id is the workflow id, and it travels into logs, terminals, file names, URLs and headers:
# printable ASCII without spaces or line breaks, one pattern at every entry point (client, CLI, API).
TASK_ID_PATTERN = r"^[A-Za-z0-9._:/-]{1,200}$"
TASK_ID_RULE = "1 to 200 characters from A-Z a-z 0-9 . _ : / -"
TaskId = Annotated[
    str, Field(pattern=TASK_ID_PATTERN, description=f"The task (= workflow) id: {TASK_ID_RULE}.")
]


class TaskPhase(StrEnum):
    """Where a task is in its lifecycle (see DESIGN.md)."""

    RECEIVED = "received"
    INITIALIZING = "initializing"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    COMMITTING = "committing"
    RECONCILING = "reconciling"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    HANDED_OFF = "handed_off"

    @property
    def terminal(self) -> bool:
        """Whether the task has ended in this phase."""
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        TaskPhase.COMPLETED,
        TaskPhase.FAILED,
        TaskPhase.REJECTED,
        TaskPhase.CANCELLED,
        TaskPhase.HANDED_OFF,
    }
)


class PolicyVerdict(StrEnum):
    """What the policy says about a proposed action."""

    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    DENY = "deny"


# An approver written with this prefix names a group of ``PolicySpec.groups``.
GROUP_PREFIX = "group:"


class PolicyRule(BaseModel):
    """A rule matching actions by tool name, effect class and a condition. The first match wins."""

    model_config = ConfigDict(extra="forbid")

    tool: str | None = Field(default=None, description="Tool name; omit to match any tool.")
    effect: EffectClass | None = Field(default=None, description="Effect class; omit for any.")
    when: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CONDITION_CHARS,
        description="A CEL expression the action must also satisfy, over args, tool, effect, agent, "
        "caller, tenant and labels (docs/approvals.md), e.g. 'args.amount > 1000'; omit to match "
        "on tool and effect alone. One that cannot be evaluated for an action fails closed.",
    )
    decision: PolicyVerdict
    approvers: list[str] = Field(default_factory=list)
    reason: str = ""
    sla: ApprovalSla | None = Field(
        default=None, description="For 'require_approval': reminders, escalation and expiry."
    )
    quorum: Quorum | None = Field(
        default=None,
        description="For 'require_approval': how many distinct approvers, none the task's starter, must "
        "approve (default: any one of them).",
    )

    @model_validator(mode="after")
    def _approvers_when_required(self) -> PolicyRule:
        if self.decision is PolicyVerdict.REQUIRE_APPROVAL and not self.approvers:
            raise ValueError("a 'require_approval' rule needs at least one approver")
        if self.sla is not None and self.decision is not PolicyVerdict.REQUIRE_APPROVAL:
            raise ValueError("sla applies to 'require_approval' rules only")
        if self.quorum is not None and self.decision is not PolicyVerdict.REQUIRE_APPROVAL:
            raise ValueError("quorum applies to 'require_approval' rules only")
        if self.when is not None:
            try:
                compile_condition(self.when)
            except ConditionError as err:
                raise ValueError(f"condition {self.when!r}: {err}") from None
        return self

    def deciders(self) -> list[str]:
        """Everyone who may decide the rule's requests: its approvers, then its escalation group."""
        escalated = self.sla.escalate_to if self.sla else []
        return [*self.approvers, *(a for a in escalated if a not in self.approvers)]


class PolicySpec(BaseModel):
    """The task's action policy.

    With no matching rule, sandbox commands are allowed (they run isolated) and business writes
    require approval by ``default_approvers``; a write with no approver configured is denied.
    """

    model_config = ConfigDict(extra="forbid")

    rules: list[PolicyRule] = Field(default_factory=list)
    default_approvers: list[str] = Field(default_factory=list)
    on_reject: Literal["continue", "end"] = Field(
        default="continue",
        description="After a rejection the model always sees the message; 'end' then ends the "
        "task as rejected, 'continue' lets the agent carry on.",
    )
    signers: dict[str, str] = Field(
        default_factory=dict,
        description="Each signing principal's Ed25519 public key (base64; `agent-worker keys new`).",
    )
    require_signatures: bool = Field(
        default=False, description="Ignore decisions without a valid signature from a registered key."
    )
    on_revoked: Literal["reapprove", "hand_off"] = Field(
        default="reapprove",
        description="When the approver lost the permission before the action ran: ask for approval "
        "again, or hand the task off.",
    )
    allowed_first: bool = Field(
        default=True,
        description="Run a model response's allowed actions before waiting for the approvals its other "
        "actions need, so approvers see their results; false: run them all after the decisions.",
    )
    parallel_actions: int = Field(
        default=4, ge=1, le=32, description="Actions of one model response that run at the same time."
    )
    grants: GrantPolicy | None = Field(
        default=None,
        description="Approvers may approve and remember: a remembered grant answers later matching "
        "actions in place of a request (docs/approvals.md#remembered-grants); none: they may not.",
    )
    on_input: Literal["next_turn", "interrupt"] = Field(
        default="next_turn",
        description="Follow-up input that arrives while an agent turn runs: wait for the next turn, or "
        "interrupt (cancel) the running turn and start it again with the input.",
    )
    groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description=f"Named groups of principals: an approver written '{GROUP_PREFIX}NAME' (in a rule's "
        "approvers, default_approvers or an sla's escalate_to) stands for its members.",
    )

    @model_validator(mode="after")
    def _signers_for_approvers(self) -> PolicySpec:
        self._expand_groups()
        for index, rule in enumerate(self.rules):
            if rule.quorum is not None and rule.quorum.required > len(rule.deciders()):
                raise ValueError(
                    f"rules.{index}: a quorum of {rule.quorum.required} needs as many approvers; "
                    f"it has {len(rule.deciders())} ({', '.join(rule.deciders())})"
                )
        if self.require_signatures:
            approvers = {a for rule in self.rules for a in rule.approvers} | set(self.default_approvers)
            approvers |= {a for rule in self.rules if rule.sla for a in rule.sla.escalate_to}
            unkeyed = sorted(approvers - set(self.signers))
            if unkeyed:
                raise ValueError(f"require_signatures needs a key in signers for: {', '.join(unkeyed)}")
        return self

    def _expand_groups(self) -> None:
        """Put each group's members in place of its ``group:NAME`` (once each, in order), so that
        requests, the inbox and the checks only ever see principals. A spec expanded already is
        unchanged by it (replays and continue-as-new parse it again)."""

        def expand(approvers: list[str]) -> list[str]:
            out: list[str] = []
            for name in approvers:
                if name.startswith(GROUP_PREFIX):
                    group = name.removeprefix(GROUP_PREFIX)
                    if group not in self.groups:
                        raise ValueError(f"approver {name!r}: no group {group!r} in policy.groups")
                    members = self.groups[group]
                    if not members:
                        raise ValueError(f"approver {name!r}: group {group!r} has no members")
                else:
                    members = [name]
                out += [m for m in members if m not in out]
            return out

        self.default_approvers = expand(self.default_approvers)
        for rule in self.rules:
            rule.approvers = expand(rule.approvers)
            if rule.sla is not None:
                rule.sla.escalate_to = expand(rule.sla.escalate_to)


# A thread id: short, and safe inside a visibility query (no quotes, no spaces).
THREAD_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

# Durations become timers and deadlines: keep them where datetime arithmetic cannot overflow.
MAX_DURATION_SECONDS = 10 * 365 * 24 * 3600


class BudgetExtension(BaseModel):
    """Who may extend a task's budget when it runs out, and by how much: at a hard limit the task asks
    ``approvers`` (an approval request like any other: signed, version-bound, re-authorized) instead of
    handing off. Approved, the limit grows by its ``add_*`` (or by the approver's edit of ``add``);
    rejected or unanswered, the task hands off, explained."""

    model_config = ConfigDict(extra="forbid")

    approvers: list[str] = Field(min_length=1, description="The principals who may extend it.")
    add_cost_usd: float | None = Field(default=None, gt=0)
    add_tokens: int | None = Field(default=None, ge=1)
    add_model_calls: int | None = Field(default=None, ge=1)
    add_turns: int | None = Field(default=None, ge=1)
    times: int = Field(default=1, ge=1, le=100, description="Extensions the task may ask for, at most.")
    sla: ApprovalSla | None = Field(
        default=None,
        description="Reminders, escalation and deadline of the request (none: the task's "
        "approval_timeout_seconds). Unanswered by its deadline, the task hands off.",
    )

    @model_validator(mode="after")
    def _adds_something(self) -> BudgetExtension:
        if all(v is None for v in (self.add_cost_usd, self.add_tokens, self.add_model_calls, self.add_turns)):
            raise ValueError(
                "an extension must add to at least one budget: add_cost_usd, add_tokens, "
                "add_model_calls or add_turns"
            )
        return self

    def adds(self, budget: str) -> float | None:
        """What one extension adds to ``budget`` (a ``Budgets`` field name), or None: not extendable."""
        return {
            "max_cost_usd": self.add_cost_usd,
            "max_tokens": self.add_tokens,
            "max_model_calls": self.add_model_calls,
            "max_turns": self.add_turns,
        }.get(budget)


class Budgets(BaseModel):
    """Limits on one task. Reaching one ends the task ``handed_off``, explained (or, with an
    ``extension``, asks for more first).

    A sub-task draws on its parent's budgets: its cost, tokens, model calls and wall time are a
    reservation from what the parent has left, shared among the sub-tasks the same response starts,
    and what it spent counts as the parent's (``Usage.sub_task_*``).
    """

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=20, ge=1, le=100_000)
    max_actions: int = Field(default=50, ge=1, le=1_000_000)
    max_model_calls: int = Field(default=200, ge=1)
    max_tokens: int | None = Field(
        default=None, ge=1, description="Input plus output tokens, from SDK usage."
    )
    max_cost_usd: float | None = Field(default=None, gt=0, description="At the worker's configured prices.")
    max_wall_seconds: float | None = Field(
        default=None, gt=0, description="From start to the next turn; time awaiting approval counts."
    )
    max_sandbox_seconds: float = Field(default=900, gt=0)
    approval_timeout_seconds: float = Field(
        default=7 * 24 * 3600, gt=0, le=MAX_DURATION_SECONDS, description="At most ten years."
    )
    soft_limit: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="A fraction of a limit (cost, tokens, model calls): past it, the task notifies "
        "``notify`` once per budget (``budget.soft_limit``) and goes on.",
    )
    notify: list[str] = Field(
        default_factory=list,
        description="Principals told of a soft limit (none: the extension's approvers, if any).",
    )
    extension: BudgetExtension | None = None


# Command records and artifact references a task keeps inline when its spec does not say
# (``TaskSpec.inline_evidence``); tasks begun before patch ``lean-evidence`` keep the earlier default.
INLINE_EVIDENCE = 20
INLINE_EVIDENCE_BEFORE = 100


# A model string's length (``TaskSpec.model``): provider prefix and model name.
MAX_MODEL_NAME_CHARS = 200
# An agent's name (``TaskSpec.agent``): it is the search attribute ``AgentName``, which Temporal caps
# at 2,048 bytes; 200 characters of up to 4 UTF-8 bytes each stay well inside.
MAX_AGENT_NAME_CHARS = 200


# The least ``TaskSpec.continue_as_new_before_wait``: a run continued before a wait begins that wait at
# 3 events (more only for input that arrived in between), so it does not continue again before it.
MIN_EVENTS_BEFORE_WAIT = 10
# What an unset ``continue_as_new_before_wait`` means (since ``short-wait-by-default``): every task
# that has done anything before its wait begins it in a short run, so a decision that finds it
# evicted from the workflow cache replays a few events instead of all the task did before
# (``bench.approval_cpu``). It weighs the same in the cache (``bench.cache_memory``).
DEFAULT_EVENTS_BEFORE_WAIT = MIN_EVENTS_BEFORE_WAIT


class TaskSpec(BaseModel):
    """What a client asks for. Plain JSON; every field but ``agent`` and ``prompt`` has a default."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(
        min_length=1, max_length=MAX_AGENT_NAME_CHARS, description="Name of a registered agent."
    )
    prompt: str = Field(min_length=1)
    tenant: str = Field(default="default", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    inputs: list[InputFile] = Field(default_factory=list)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    budgets: Budgets = Field(default_factory=Budgets)
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)
    labels: dict[str, str] = Field(default_factory=dict)
    continue_as_new_after_events: int | None = Field(
        default=None,
        ge=50,
        description="Continue as new past this many history events (Temporal's suggestion applies too).",
    )
    continue_as_new_before_wait: int | None = Field(
        default=None,
        ge=0,
        description="Before the task waits for a person (an approval, a question), continue as new when "
        "its run's history has at least this many events, so the wait begins in a short run: a waiting "
        "task the worker's cache let go replays only that run when its decision comes, not all the task "
        f"did before. Unset: {DEFAULT_EVENTS_BEFORE_WAIT}. 0: never "
        f"(the wait stays in the run that led to it). Otherwise at least {MIN_EVENTS_BEFORE_WAIT} "
        "(docs/operations.md, 'Tasks that wait long').",
    )
    thread: str | None = Field(
        default=None,
        pattern=THREAD_PATTERN,
        description="A conversation thread: a task naming a thread whose earlier task has finished "
        "continues that task's conversation, its prompt the next user message (see workflows/threads.py).",
    )
    started_by: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PRINCIPAL_CHARS,
        description="The principal who started the task (the HTTP API sets the caller). A quorum never "
        "counts their approval (separation of duties).",
    )
    inline_evidence: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="Command records and artifact references the task carries inline. At each "
        "continue-as-new and at the end, older ones move to the artifact store (`Evidence.archived`), "
        "so the state and the result stay bounded however long the task runs. None: "
        f"{INLINE_EVIDENCE} ({INLINE_EVIDENCE_BEFORE}, and at continue-as-new only, for a task begun "
        "before agent-worker 0.1.0 of 2026-12-04, patch `lean-evidence`).",
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MODEL_NAME_CHARS,
        description="Run the agent on this model instead of its registration's: a model string the "
        "worker resolves as it resolves an agent's (`local/qwen2`: provider `local`; no prefix: "
        "`openai`), its fallbacks still following. Set by `agent-worker fork --model` (docs/forks.md). "
        "None: the registration's model. A worker on scripted models answers with those regardless.",
    )
    fork: ForkSpec | None = Field(
        default=None,
        description="This task is a fork of another at one of its steps (docs/forks.md); set by "
        "`agent-worker fork`, the client's `fork` and the API.",
    )

    @model_validator(mode="after")
    def _wait_limit_off_or_long_enough(self) -> TaskSpec:
        limit = self.continue_as_new_before_wait
        if limit is not None and 0 < limit < MIN_EVENTS_BEFORE_WAIT:
            raise ValueError(
                f"continue_as_new_before_wait: {limit} is too few events; give 0 (never) or at least "
                f"{MIN_EVENTS_BEFORE_WAIT}"
            )
        return self

    @model_validator(mode="after")
    def _unique_input_names(self) -> TaskSpec:
        names = [f.name for f in self.inputs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"input names must be unique; repeated: {', '.join(duplicates)}")
        return self

    @model_validator(mode="after")
    def _quorum_reachable_without_the_starter(self) -> TaskSpec:
        for index, rule in enumerate(self.policy.rules):
            if rule.quorum is None or self.started_by not in rule.deciders():
                continue
            others = [a for a in rule.deciders() if a != self.started_by]
            if rule.quorum.required > len(others):
                raise ValueError(
                    f"policy.rules.{index}: a quorum of {rule.quorum.required} cannot be met: the "
                    f"starter {self.started_by!r} does not count, leaving {len(others)} approver(s)"
                )
        return self


class BatchItem(BaseModel):
    """One proposed action in the batch the workflow is working through."""

    action: ProposedAction
    verdict: PolicyVerdict
    policy_reason: str = ""
    request_id: str | None = None
    result: ActionResult | None = None
    authorized: bool = Field(default=False, description="Re-authorized right before it ran.")


class Usage(BaseModel):
    """What the task has consumed so far."""

    turns: int = 0
    actions: int = 0
    model_calls: int = 0
    replayed_model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    sandbox_seconds: float = 0.0
    model: str | None = Field(default=None, description="The model that ran the latest turn.")
    active_seconds: float = Field(
        default=0.0, description="Time working (turns, actions, their retries), by the workflow's clock."
    )
    waiting_seconds: float = Field(default=0.0, description="Time waiting for a human's decision.")
    provider: str | None = Field(default=None, description="The provider of that model.")
    api: str | None = Field(default=None, description="The API that model was called through.")
    runs: int = Field(default=1, description="Workflow runs so far (continue-as-new starts a new one).")
    takeovers: int = Field(default=0, description="Turns and commands taken over from a lost worker.")
    takeover_seconds: float = Field(
        default=0.0,
        description="Their time from the lost worker's last heartbeat to the work resuming elsewhere, "
        "summed.",
    )
    sub_tasks: int = Field(default=0, description="Sub-tasks finished (their spend is below).")
    sub_task_cost_usd: float = Field(default=0.0, description="What the sub-tasks spent, their own included.")
    sub_task_input_tokens: int = 0
    sub_task_output_tokens: int = 0
    sub_task_model_calls: int = 0
    costliest_turn_usd: float = Field(
        default=0.0, description="The dearest turn so far: a turn starts only if what is left covers it."
    )
    largest_turn_tokens: int = 0
    largest_turn_calls: int = 0


class Reservation(BaseModel):
    """What a running sub-task may spend of its parent's budgets (None: that budget has no limit)."""

    cost_usd: float | None = None
    tokens: int | None = None
    model_calls: int | None = None


class DelegationRecord(BaseModel):
    """A sub-task run as a child task, and how it ended."""

    call_id: str
    task_id: str
    agent: str
    phase: TaskPhase
    final_output: str | None = None
    reason: str | None = None


class FollowUp(BaseModel):
    """Input a user adds while the task runs (signal ``add_input``); the next turn sees it."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=100_000)
    principal: str | None = Field(default=None, max_length=256)


# Read-only tool call records a task keeps inline (the newest): each is also a `tool.called` event.
MAX_INLINE_TOOL_CALLS = 200


class TaskState(BaseModel):
    """Everything the workflow needs to continue a task, carried across continue-as-new."""

    schema_version: int = 1
    phase: TaskPhase = TaskPhase.RECEIVED
    turn: int = 0
    run_state_ref: str | None = None
    conversation_ref: str | None = None
    follow_ups: list[FollowUp] = Field(default_factory=list)
    batch: list[BatchItem] = Field(default_factory=list)
    pending_results: list[ActionResult] = Field(default_factory=list)
    end_after_turn: TaskPhase | None = None
    requests: list[ApprovalRequest] = Field(default_factory=list)
    decisions: list[DecisionRecord] = Field(default_factory=list)
    ignored: list[IgnoredDecision] = Field(default_factory=list)
    ignored_count: int = Field(
        default=0, description="Every ignored decision so far (`ignored` keeps a tail of them)."
    )
    ignored_window: int = Field(
        default=0,
        description="Ignored decisions and inputs recorded as events since the last event delivery.",
    )
    ignored_unreported: dict[str, int] = Field(
        default_factory=dict,
        description="Ignored ones past the per-delivery bound, by event type: counted, and summed up "
        "in one event at the next delivery.",
    )
    inputs: list[ArtifactRef] = Field(default_factory=list)
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    sandbox: SandboxRef | None = None
    commands: list[CommandRecord] = Field(default_factory=list)
    writes: list[WriteEvidence] = Field(default_factory=list)
    delegations: list[DelegationRecord] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(
        default_factory=list,
        description="Read-only tool calls, the newest `MAX_INLINE_TOOL_CALLS` (each also an event).",
    )
    tool_calls_dropped: int = Field(
        default=0, description="Read-only tool calls not kept in `tool_calls` (the cap), counted."
    )
    tool_effects: list[ToolEffectRecord] = Field(
        default_factory=list,
        description="Calls of effect tools the agent brought (own functions, MCP tools), as run.",
    )
    mcp_catalog_ref: str | None = Field(
        default=None, description="The agent's MCP tools as first listed: every turn sees these."
    )
    lost_sandboxes: list[str] = Field(default_factory=list, description="Sandboxes that vanished mid-task.")
    current_agent: str = Field(
        default="",
        description="The SDK agent the run is on: the last turn's (after a handoff, the specialist).",
    )
    archived_evidence: list[ArtifactRef] = Field(
        default_factory=list, description="Older evidence moved to the artifact store (`EvidenceArchive`)."
    )
    archived_missing: list[str] = Field(
        default_factory=list, description="What the archived evidence lacks (kept inline, for `missing`)."
    )
    admitted: bool = Field(default=False, description="Holds a place under its tenant's cap.")
    colocated: list[str] = Field(
        default_factory=list,
        description="Roles (`agent`, `sandbox`) whose activities run on the task queue itself rather "
        "than on their role queues (`workflows.placement`), as the admitting worker said.",
    )
    refused_here: str | None = Field(
        default=None,
        description="The sandbox home queue whose command the worker running the task refused to run "
        "here (`sandbox.exec_here`: `sandbox_elsewhere`): its later commands go to that home queue at "
        "once (`workflows.sandbox_effects`).",
    )
    usage: Usage = Field(default_factory=Usage)
    budget_added: dict[str, float] = Field(
        default_factory=dict, description="What approved extensions added, by budget (`Budgets` field)."
    )
    extensions: int = Field(default=0, description="Budget extensions asked for so far.")
    soft_noticed: list[str] = Field(default_factory=list, description="Budgets past their soft limit.")
    reservations: dict[str, Reservation] = Field(
        default_factory=dict, description="Running sub-tasks' shares of the budgets, by call id."
    )
    final_output: str | None = None
    reason: str | None = None
    request_seq: int = 0
    event_seq: int = 0
    delivered_seq: int = Field(default=0, description="The last event delivered to the event sink.")
    events: list[Event] = Field(default_factory=list)
    started_at: datetime | None = None
    phase_since: datetime | None = Field(
        default=None, description="When the current phase began (splits usage into active and waiting)."
    )
    run_chain: str | None = Field(
        default=None,
        description="The run chain (`first_execution_run_id`) that keys what derives from the task id "
        "(sandbox, journal, event ids, signatures, operation keys); None for tasks that started before "
        "run-chain identity existed, which keep the task id alone.",
    )
    fork: ForkState | None = Field(default=None, description="A fork's parent and what it took from it.")


# The release line a run began on (``TaskInput.release``): the one its code behaves as, for its whole
# run chain and its sub-tasks. A run begun on a line takes every patch that line folded
# (``workflows.patches.FOLDED``) as base behaviour, without a marker, and the behaviour the line
# brought (``workflows.patches.on_line``); an input that names no release began on 0.1 (every history
# recorded before 0.2.0 has such an input), and its run asks each patch as it always did.
# docs/upgrading.md says what this means for an upgrade.
Release = Literal["0.1", "0.2", "0.3", "0.4"]
FIRST_RELEASE: Release = "0.1"
CURRENT_RELEASE: Release = "0.4"


class TaskInput(BaseModel):
    """The workflow input: the spec, the release line it begins on, and the state when continuing as
    new."""

    model_config = ConfigDict(extra="forbid")

    spec: TaskSpec
    state: TaskState | None = None
    release: Release | None = Field(
        default=None,
        # Left out when unset, so a 0.1 run's continue-as-new and sub-task inputs stay what they were
        # (a 0.1 worker, which knows no such field, still reads them).
        exclude_if=lambda release: release is None,
        description="The release line the task begins on; its continue-as-new runs and sub-tasks keep "
        "it. '0.4' (what agent-worker's client, CLI and API send): every behaviour of 0.4.0 is the "
        "base, with no patch markers in the history, a change to running published at once and one to "
        "another working phase once it settles; '0.3' and '0.2' the same as of 0.3.0 and 0.2.0. "
        "Omitted (a raw start with the bare TaskSpec or {\"spec\": ...}): '0.1', each change since "
        "0.1.0 recorded as a patch marker, as 0.1.x workers did. A worker refuses a line newer than "
        "its own (docs/upgrading.md).",
    )


class Evidence(BaseModel):
    """What a finished task can show. Anything missing is listed, never assumed."""

    inputs: list[ArtifactRef]
    artifacts: list[ArtifactRef]
    commands: list[CommandRecord]
    approvals: list[DecisionRecord]
    writes: list[WriteEvidence]
    delegations: list[DelegationRecord] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(
        default_factory=list,
        description="Read-only tool calls: name, call id, digests of the arguments and output (both "
        "in the artifact store), duration; the newest `MAX_INLINE_TOOL_CALLS` of the task.",
    )
    tool_calls_dropped: int = Field(
        default=0,
        description="Older read-only tool calls not kept (their `tool.called` events still name them).",
    )
    tool_effects: list[ToolEffectRecord] = Field(
        default_factory=list,
        description="Calls of effect tools the agent brought (own functions, MCP tools): operation "
        "key, digests of the arguments and output, whether a lookup found it done.",
    )
    archived: list[ArtifactRef] = Field(
        default_factory=list,
        description="Older command records and artifact references, moved to the artifact store at "
        "continue-as-new: JSON `EvidenceArchive` documents, oldest first, that come before `commands` "
        "and `artifacts`. `agent-worker evidence` puts them back in line.",
    )
    forked_from: ForkOrigin | None = Field(
        default=None, description="A fork's parent, its step, and the parent's receipts the fork reused."
    )

    @property
    def complete(self) -> bool:
        """Whether nothing is missing."""
        return not self.missing


class EvidenceArchive(BaseModel):
    """One part of a task's archived evidence, as stored (``artifacts.archive``): command records and
    artifact references that no longer travel in the task's state."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    schema_: Literal["agent-worker.evidence-archive/v1"] = Field(
        default="agent-worker.evidence-archive/v1", alias="schema"
    )
    task_id: str
    part: int = Field(ge=1, description="1 for the oldest part.")
    commands: list[CommandRecord] = Field(default_factory=list)
    artifacts: list[ArtifactRef] = Field(default_factory=list)


class StoredArchive(BaseModel):
    """Input of ``artifacts.archive_stored``: one part of a task's older evidence with each command
    record named by the digest ``sandbox.exec`` stored it under (``schemas.sandbox.record_digest``),
    so archiving does not write the records into the task's history a second time. The document
    stored is the ``EvidenceArchive`` that ``artifacts.archive`` would store for the same part."""

    task_id: str
    part: int = Field(ge=1)
    commands: list[str] = Field(default_factory=list, description="Digests of the stored records.")
    takeovers: dict[str, float] = Field(
        default_factory=dict,
        description="A record's ``takeover_seconds`` by its digest, for the few that have one (the "
        "stored record goes without it).",
    )
    artifacts: list[ArtifactRef] = Field(default_factory=list)


class BatchView(BaseModel):
    """One action of the model response the task is working through, as ``status`` shows it."""

    call_id: str
    tool: str
    effect: EffectClass
    verdict: PolicyVerdict
    agent: str = Field(
        default="", description="The agent that proposed it (after a handoff, the specialist)."
    )
    request_id: str | None = None
    state: Literal["waiting", "pending"] | ActionStatus = Field(
        description="'waiting' for a decision, 'pending' to run, else what became of it."
    )
    output: str | None = Field(default=None, description="Its result's output, cut to 2,000 characters.")


class TaskStatus(BaseModel):
    """The ``status`` query's answer."""

    task_id: str
    agent: str
    tenant: str
    phase: TaskPhase
    turn: int
    pending: list[ApprovalRequest]
    budgets: Budgets
    usage: Usage
    reason: str | None = None
    final_output: str | None = None
    ignored: list[IgnoredDecision] = Field(default_factory=list)
    ignored_count: int = Field(default=0, description="Ignored decisions so far (`ignored` is a tail).")
    last_events: list[Event] = Field(default_factory=list)
    colocated: list[str] = Field(
        default_factory=list,
        description="Roles whose activities this task runs on its task queue itself (see TaskState).",
    )
    prompt: str = Field(default="", description="The task's prompt, cut to 500 characters.")
    batch: list[BatchView] = Field(
        default_factory=list,
        description="The actions of the model response being worked through: calls, verdicts, results.",
    )
    current_agent: str = Field(
        default="", description="The SDK agent the run is on (after a handoff, the specialist)."
    )
    forked_from: ForkOrigin | None = Field(default=None, description="A fork's parent and step.")
    require_signatures: bool = Field(
        default=False, description="The policy refuses an unsigned decision (a client signs before sending)."
    )
    signers: list[str] = Field(
        default_factory=list, description="The principals whose public key the policy registers."
    )


class TaskResult(BaseModel):
    """The workflow's result. ``evidence_complete`` is False whenever anything the evidence should
    hold is missing: a completed task is then never reported as plain success."""

    task_id: str
    phase: TaskPhase
    final_output: str | None = None
    reason: str | None = None
    evidence: Evidence
    usage: Usage
    evidence_complete: bool = True
    conversation_ref: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="The task's conversation in the artifact store (tasks on a thread): where the "
        "thread's next task continues from.",
    )
