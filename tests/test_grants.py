"""Remembered grants against the dev server: an approve-and-remember answers the next matching
write in place of a request, and the evidence and events say which grant approved which action; a
grant revoked from the CLI answers nothing more; a grant voids itself when the tool's schema, the
policy or the agent's version changes; only an approver can make one."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.events import JsonlEventSink
from agent_worker.activities.stores.state import build_grant_store
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.security.signing import new_private_key, public_key_text

from agent_worker.client import AgentWorkerClient, DecisionRefused
from tests.helpers.support import TaskEnv, assert_replays, example_spec, run_cli, running_worker

POLICY: dict[str, Any] = {"default_approvers": ["finance-lead"], "grants": {}}
SMALL = "int(args.value) <= 100"


def recording(amount: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A task whose agent proposes one write of ``amount`` (a write needs finance-lead by default)."""
    return {"agent": "recorder", "prompt": f"record: {amount}", "policy": policy or POLICY}


def events(env: TaskEnv, task_id: str, kind: str) -> list[dict[str, Any]]:
    """The data of the task's events of ``kind``, as the event sink holds them."""
    return [e.data for e in JsonlEventSink(env.config.events_dir).read(task_id) if e.type.value == kind]


async def remember_first(env: TaskEnv, when: str = SMALL, policy: dict[str, Any] | None = None) -> str:
    """Run a write of 50, approved by finance-lead with remember (``when``); the grant's id."""
    handle = await env.start(recording("50", policy))
    [request] = (await env.awaiting_approval(handle)).pending
    client = AgentWorkerClient(env.client, env.task_queue)
    outcome = await client.decide(
        handle.id, request.request_id, "approve", "finance-lead", remember={"when": when}
    )
    assert outcome is not None and outcome.accepted, outcome
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [record] = result.evidence.approvals
    assert record.remembered_as is not None and record.remember is not None
    [created] = events(env, handle.id, "grant.created")
    assert created["grant_id"] == record.remembered_as and created["when"] == when
    await assert_replays(env.client, handle.id)
    return record.remembered_as


async def asks_again(
    env: TaskEnv, amount: str = "70", policy: dict[str, Any] | None = None, *, replay: bool = False
) -> str:
    """Start a write of ``amount``: it waits for finance-lead (no grant answered); approve it and
    let it finish (``replay``: then replay its history); its task id."""
    handle = await env.start(recording(amount, policy))
    status = await env.awaiting_approval(handle)
    assert [r.approvers for r in status.pending] == [["finance-lead"]]
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and [a.via for a in result.evidence.approvals] == ["update"]
    assert events(env, handle.id, "grant.used") == []
    if replay:
        await assert_replays(env.client, handle.id)
    return handle.id


async def test_a_remembered_grant_approves_the_next_matching_write_without_a_request(env: TaskEnv) -> None:
    """After finance-lead approves 50 and remembers `value <= 100`, a write of 70 commits with no
    request (never awaiting approval); its evidence names the grant and its principal, and a
    `grant.used` event ties the grant to the action. A write of 500 still asks."""
    grant_id = await remember_first(env)
    handle = await env.start(recording("70"))
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [record] = result.evidence.approvals
    assert (record.via, record.grant_id, record.principal) == ("grant", grant_id, "finance-lead")
    [used] = events(env, handle.id, "grant.used")
    assert used["grant_id"] == grant_id and used["tool"] == "record_value"
    assert used["request_id"] == record.request_id and used["version"] == record.version
    assert events(env, handle.id, "approval.requested") == []
    phases = [e["phase"] for e in events(env, handle.id, "phase.changed")]
    assert TaskPhase.AWAITING_APPROVAL.value not in phases
    assert env.business().count() == 2
    await assert_replays(env.client, handle.id)
    await asks_again(env, "500")  # outside the grant's condition


async def test_a_grant_revoked_from_the_cli_answers_nothing_more(
    env: TaskEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agent-worker grants revoke` marks the grant revoked (listed so with --all, gone from the
    active list); the next matching write asks finance-lead again."""
    grant_id = await remember_first(env)
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    code, out, _ = await run_cli(capsys, "grants", "list")
    assert code == 0 and grant_id in out and "when int(args.value) <= 100" in out
    code, out, err = await run_cli(
        capsys, "grants", "revoke", grant_id, "--as", "finance-lead", "--reason", "too broad"
    )
    assert code == 0 and f"revoked {grant_id}" in out, err
    code, out, _ = await run_cli(capsys, "grants", "list")
    assert grant_id not in out
    code, out, _ = await run_cli(capsys, "grants", "list", "--all")
    assert grant_id in out and "revoked" in out and "too broad" in out
    await asks_again(env)


async def test_a_grant_voids_itself_when_the_policy_changes(env: TaskEnv) -> None:
    """A task under a changed policy (one rule more) does not take the grant: the grant is void in
    the store, naming the policy change, the task's `grant.voided` event says so, and it asks."""
    grant_id = await remember_first(env)
    changed = {**POLICY, "rules": [{"tool": "run_shell", "decision": "allow"}]}
    task_id = await asks_again(env, policy=changed, replay=True)
    [voided] = events(env, task_id, "grant.voided")
    assert voided["grant_id"] == grant_id and "policy changed" in voided["reason"]
    grant = build_grant_store(env.config).get(grant_id)
    assert grant is not None and grant.status == "void" and "policy changed" in (grant.status_reason or "")
    await asks_again(env)  # void for good, even under the first policy again


async def test_a_grant_voids_itself_when_the_tools_schema_changes(config_env: TaskEnv) -> None:
    """After a release whose record_value takes another argument, the grant is void (naming the
    tool's schema) and the write asks finance-lead again."""
    env = config_env
    async with running_worker(env.client, env.config):
        grant_id = await remember_first(env)
    release = env.config.model_copy(update={"agents": ["tests.helpers.grant_agents:schema_changed"]})
    async with running_worker(env.client, release):
        task_id = await asks_again(env)
    [voided] = events(env, task_id, "grant.voided")
    assert voided["grant_id"] == grant_id and "schema of tool record_value changed" in voided["reason"]
    grant = build_grant_store(env.config).get(grant_id)
    assert grant is not None and grant.status == "void"


async def test_a_grant_voids_itself_when_the_agents_version_changes(config_env: TaskEnv) -> None:
    """After a release that declares recorder version 2 (same tools), the grant is void and asks."""
    env = config_env
    async with running_worker(env.client, env.config):
        grant_id = await remember_first(env)
    release = env.config.model_copy(update={"agents": ["tests.helpers.grant_agents:version_changed"]})
    async with running_worker(env.client, release):
        task_id = await asks_again(env)
    [voided] = events(env, task_id, "grant.voided")
    assert voided["grant_id"] == grant_id and "changed version ('' -> '2')" in voided["reason"]


async def test_only_an_approver_of_a_grants_policy_can_remember(env: TaskEnv) -> None:
    """A principal who is not the request's approver cannot remember (refused, nothing stored); nor
    can an approver where the policy has no `grants`; the request stays open for the approver."""
    client = AgentWorkerClient(env.client, env.task_queue)
    handle = await env.start(recording("50"))
    [request] = (await env.awaiting_approval(handle)).pending
    with pytest.raises(DecisionRefused, match="may not decide"):
        await client.decide(handle.id, request.request_id, "approve", "mallory", remember={"scope": "tenant"})
    plain = await env.start(recording("50", {"default_approvers": ["finance-lead"]}))
    [other] = (await env.awaiting_approval(plain)).pending
    with pytest.raises(DecisionRefused, match="allows no remembered grants"):
        await client.decide(plain.id, other.request_id, "approve", "finance-lead", remember={})
    assert build_grant_store(env.config).listed(ended=True) == []
    await env.approve(handle)
    await env.approve(plain)
    await asyncio.wait_for(asyncio.gather(handle.result(), plain.result()), 60)


async def test_a_signed_grant_is_checked_at_each_use_and_an_altered_one_is_refused(
    env: TaskEnv, tmp_path: Path
) -> None:
    """Under `require_signatures` the remember is signed with the decision: the grant approves the
    next small write; once its stored condition is widened behind the signer's back, the task refuses
    it (`grant.refused`, the signature does not verify) and asks finance-lead for a large one."""
    key = new_private_key("finance-lead", tmp_path / "keys")
    policy = {**POLICY, "signers": {"finance-lead": public_key_text(key)}, "require_signatures": True}
    client = AgentWorkerClient(env.client, env.task_queue)
    first = await env.start(recording("50", policy))
    [request] = (await env.awaiting_approval(first)).pending
    await client.decide(
        first.id, request.request_id, "approve", "finance-lead", remember={"when": SMALL}, sign_with=key
    )
    grant_id = (await asyncio.wait_for(first.result(), 60)).evidence.approvals[0].remembered_as
    assert grant_id is not None
    second = await env.start(recording("70", policy))
    assert (await asyncio.wait_for(second.result(), 60)).evidence.approvals[0].grant_id == grant_id
    await assert_replays(env.client, second.id)

    with sqlite3.connect(env.config.data_dir / "grants.db") as db:
        [(text,)] = db.execute("SELECT record FROM grants WHERE grant_id = ?", (grant_id,)).fetchall()
        record = json.loads(text)
        record["remember"]["when"] = "true"
        db.execute("UPDATE grants SET record = ? WHERE grant_id = ?", (json.dumps(record), grant_id))
    third = await env.start(recording("5000", policy))
    [asked] = (await env.awaiting_approval(third)).pending
    [refused] = events(env, third.id, "grant.refused") or [
        e.data for e in (await client.status(third.id)).last_events if e.type.value == "grant.refused"
    ]
    assert refused["grant_id"] == grant_id and "signature does not verify" in refused["reason"]
    await client.decide(third.id, asked.request_id, "approve", "finance-lead", sign_with=key)
    assert (await asyncio.wait_for(third.result(), 60)).evidence.approvals[0].via == "update"


async def test_the_cli_approves_and_remembers_as_the_docs_show(
    env: TaskEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The docs' example: the monthly report approved with `approve --remember --when ... --until 7d`;
    the same report started again files without a request, its evidence (`agent-worker evidence`)
    naming the grant, which
    `grants list --json` shows with the condition and an `until` a week away."""
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    spec = example_spec()
    spec["policy"]["grants"] = {"max_seconds": 30 * 86400}
    first = await env.start(spec)
    [request] = (await env.awaiting_approval(first)).pending
    code, out, err = await run_cli(
        capsys,
        *("--address", env.address, "approve", first.id, "--request", request.request_id),
        *("--version", request.version, "--as", "finance-lead", "--remember"),
        *("--when", "double(args.total) < 20000.0", "--until", "7d"),
    )
    assert code == 0 and "approve recorded" in out, (out, err)
    grant_id = (await asyncio.wait_for(first.result(), 90)).evidence.approvals[0].remembered_as
    second = await env.start(spec)
    result: TaskResult = await asyncio.wait_for(second.result(), 90)
    assert result.phase is TaskPhase.COMPLETED and result.evidence.approvals[0].grant_id == grant_id
    bundle = tmp_path / "bundle"
    code, out, _ = await run_cli(capsys, "--address", env.address, "evidence", second.id, "-o", str(bundle))
    assert code == 0 and f"by finance-lead on {request.version} via grant {grant_id}" in out, out
    code, out, _ = await run_cli(capsys, "grants", "list", "--json")
    [listed] = [json.loads(line) for line in out.splitlines()]
    assert listed["grant_id"] == grant_id and listed["remember"]["when"] == "double(args.total) < 20000.0"
    until = datetime.fromisoformat(listed["remember"]["until"])
    assert timedelta(days=6) < until - datetime.now(UTC) <= timedelta(days=7)
