"""Remembered grants: an approver's "approve and remember", kept and used in place of asking again.

An approver who approves a request may add ``remember`` (a ``Remember``): the same tool, with
arguments matching a CEL condition (``when``, the names of a policy rule's ``when``), for this agent,
this thread or the whole tenant, until a time. The task stores it as a ``Grant`` (``grants.save``)
once the decision is accepted; later, where an action of a task under the same policy would need
approval, a grant that matches answers instead of a person (``workflows.grants``).

A grant binds to what the approver saw (its ``GrantBasis``): the digest of the tool's argument
schema, the digest of the task's policy, and the agent's declared version. When any of them differs
at use, the grant voids itself: it is marked ``void`` in the store, with the reason, and is never
used again; the approver is asked. It carries the decision's signature (``security.signing`` covers
``remember``), checked again at each use when the policy requires signatures.

Pure models and helpers: workflow code uses them (deterministic).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from agent_worker.schemas.conditions import MAX_CONDITION_CHARS, ConditionError, compile_condition
from agent_worker.schemas.digests import DIGEST_PATTERN, digest_json
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

GRANT_ID_PATTERN = r"^g-[0-9a-f]{20}$"
GrantScopeKind = Literal["thread", "agent", "tenant"]
GrantStatus = Literal["active", "revoked", "void"]
# Bounds on what a grant keeps of the text it is given (it is stored, listed and copied into events).
MAX_GRANT_REASON_CHARS = 500


class Remember(BaseModel):
    """What an approver asks to remember with an ``approve`` (``ApprovalDecision.remember``).

    Attributes:
        scope: Which later actions it may answer: the task's ``agent`` (in its tenant), the task's
            ``thread`` (any agent on it), or the whole ``tenant``.
        when: A CEL condition over ``args``, ``tool``, ``effect``, ``agent``, ``caller``, ``tenant``
            and ``labels`` that the later action must satisfy (omit: any arguments).
        until: When it stops answering (omit: until revoked or void, unless the policy caps it).
    """

    model_config = ConfigDict(extra="forbid")

    scope: GrantScopeKind = "agent"
    when: str | None = Field(default=None, min_length=1, max_length=MAX_CONDITION_CHARS)
    until: AwareDatetime | None = None

    @field_validator("when")
    @classmethod
    def _compiles(cls, when: str | None) -> str | None:
        if when is not None:
            try:
                compile_condition(when)
            except ConditionError as err:
                raise ValueError(f"condition {when!r}: {err}") from None
        return when


class GrantPolicy(BaseModel):
    """``PolicySpec.grants``: approvers of this policy's requests may approve and remember."""

    model_config = ConfigDict(extra="forbid")

    max_seconds: int | None = Field(
        default=None,
        ge=60,
        le=10 * 365 * 24 * 3600,
        description="A grant's longest life: a remember without `until`, or with a later one, is "
        "refused (none: no cap).",
    )


class ActionBasis(BaseModel):
    """What a turn knows of a proposed action's tool and agent (``ProposedAction.basis``)."""

    tool_schema: str = Field(pattern=DIGEST_PATTERN, description="Digest of the tool's argument schema.")
    agent_version: str = Field(default="", description="The agent registration's declared version.")


class GrantQuery(BaseModel):
    """``TurnInput.grants``: the task's side of a grant lookup (set only when its policy allows
    grants): the turn finds, for each action it proposes, a grant that answers it."""

    tenant: str
    agent: str
    thread: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    policy: str = Field(pattern=DIGEST_PATTERN, description="Digest of the task's policy.")


class Grant(BaseModel):
    """A remembered approval, as stored (``activities.grants``) and as the turn hands it over."""

    grant_id: str = Field(pattern=GRANT_ID_PATTERN)
    principal: str
    tenant: str
    tool: str
    agent: str = Field(description="The task agent it was given for.")
    thread: str | None = Field(default=None, description="The task's thread (scope 'thread').")
    remember: Remember
    tool_schema: str = Field(pattern=DIGEST_PATTERN)
    policy: str = Field(pattern=DIGEST_PATTERN)
    agent_version: str = ""
    # The decision it came from: what its signature covers (``security.signing``).
    task_id: str
    run_chain: str | None = None
    request_id: str
    version: str = Field(pattern=DIGEST_PATTERN)
    reason: str | None = None
    signature: str | None = None
    created_at: datetime
    status: GrantStatus = "active"
    status_reason: str | None = None
    status_at: datetime | None = None
    status_by: str | None = Field(default=None, description="Who revoked it.")

    @property
    def expires_at(self) -> datetime | None:
        """When it stops answering (the approver's ``until``)."""
        return self.remember.until

    def stored(self) -> dict[str, Any]:
        """The immutable part, as a store keeps it (status travels in columns of its own)."""
        return self.model_dump(mode="json", exclude={"status", "status_reason", "status_at", "status_by"})


def policy_digest(policy: BaseModel) -> str:
    """The version of a task's policy a grant binds to: the digest of its JSON without defaults (a
    field added later, with its default, changes no digest)."""
    return digest_json(policy.model_dump(mode="json", exclude_defaults=True))


def tool_schema_digest(name: str, schema: dict[str, Any]) -> str:
    """The digest of a tool's argument schema, as a grant binds to it."""
    return digest_json({"tool": name, "parameters": schema})


def grant_id_for(task_id: str, run_chain: str | None, request_id: str) -> str:
    """A grant's id: derived from the decision it came from, so that saving it again (a retried
    activity, a replay) finds the same grant."""
    return "g-" + digest_json([task_id, run_chain, request_id]).removeprefix("sha256:")[:20]


def void_reason(grant: Grant, *, policy: str, tool_schema: str, agent: str, agent_version: str) -> str | None:
    """Why ``grant`` no longer holds for an action under ``policy`` with ``tool_schema``, proposed by a
    task of ``agent`` at ``agent_version``; None when its basis is unchanged. The agent's version is
    compared when the action's task runs the agent the grant was given for."""
    if grant.policy != policy:
        return f"the policy changed (was {grant.policy[:19]}..., now {policy[:19]}...)"
    if grant.tool_schema != tool_schema:
        return f"the schema of tool {grant.tool} changed"
    if grant.agent == agent and grant.agent_version != agent_version:
        return f"agent {agent} changed version ({grant.agent_version!r} -> {agent_version!r})"
    return None


def in_scope(grant: Grant, *, tenant: str, agent: str, thread: str | None, tool: str) -> bool:
    """Whether ``grant`` may answer an action of ``tool`` from a task of ``agent`` on ``thread`` in
    ``tenant`` (its basis and condition aside)."""
    if grant.tenant != tenant or grant.tool != tool:
        return False
    if grant.remember.scope == "agent":
        return grant.agent == agent
    if grant.remember.scope == "thread":
        return grant.thread is not None and grant.thread == thread
    return True


__all__ = [
    "GRANT_ID_PATTERN",
    "ActionBasis",
    "Grant",
    "GrantPolicy",
    "GrantQuery",
    "GrantScopeKind",
    "GrantStatus",
    "Remember",
    "grant_id_for",
    "in_scope",
    "policy_digest",
    "tool_schema_digest",
    "void_reason",
]
