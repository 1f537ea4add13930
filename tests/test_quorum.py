"""Quorum and separation of duties against the dev server: a 2-of-3 rule never counts the starter's
approval nor a second one by the same approver, waits with its progress in ``status`` and the CLI,
writes once on the second approval, is vetoed by one rejection (or, without veto, rejected once the
quorum is out of reach), and loses nothing when its worker is SIGKILLed between two approvals."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_worker.schemas.approvals import DecisionKind
from agent_worker.schemas.tasks import TaskPhase, TaskResult, TaskSpec
from agent_worker.workflows import AgentTaskWorkflow
from pydantic import ValidationError
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from tests.helpers.support import (
    REPO,
    DevServer,
    TaskEnv,
    assert_replays,
    decision,
    make_config,
    run_cli,
    sigkill,
    worker_process,
)
from tests.test_readme import runnable_blocks

STARTER = "alice"


def quorum_spec(
    value: str = "5000", *, veto: bool = True, approvers: list[str] | None = None
) -> dict[str, Any]:
    """A task started by alice whose write needs 2 distinct approvers among alice, bob and carol."""
    return {
        "agent": "recorder",
        "prompt": f"record: {value}",
        "started_by": STARTER,
        "policy": {
            "groups": {"finance": approvers or ["alice", "bob", "carol"]},
            "rules": [
                {
                    "tool": "record_value",
                    "decision": "require_approval",
                    "approvers": ["group:finance"],
                    "quorum": {"required": 2, "veto": veto},
                }
            ],
        },
    }


async def decide(
    handle: WorkflowHandle[Any, Any], principal: str, kind: str = "approve", **fields: Any
) -> str:
    """``principal`` decides the task's one pending request through the update; its answer's detail
    (raises ``WorkflowUpdateFailedError`` when the task refuses it)."""
    [request] = (await handle.query(AgentTaskWorkflow.status)).pending
    outcome = await handle.execute_update(
        AgentTaskWorkflow.decide, decision(request, kind, principal, **fields)
    )
    assert outcome.accepted is True, outcome.detail
    return outcome.detail


async def refused(handle: WorkflowHandle[Any, Any], principal: str, kind: str = "approve") -> str:
    """``principal``'s decision, refused by the task's validator: the reason."""
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await decide(handle, principal, kind)
    return str(caught.value.cause)


def test_a_quorum_the_approvers_cannot_make_up_is_refused_at_start() -> None:
    """A quorum larger than its rule's approvers, one the starter's exclusion leaves out of reach, and
    an approver naming an unknown group are each refused when the spec is validated, naming why."""
    too_big = quorum_spec(approvers=["bob"])
    with pytest.raises(ValidationError, match=r"rules\.0: a quorum of 2 needs as many approvers; it has 1"):
        TaskSpec.model_validate(too_big)
    without_starter = quorum_spec(approvers=["alice", "bob"])
    with pytest.raises(ValidationError, match=r"the starter 'alice' does not count, leaving 1 approver"):
        TaskSpec.model_validate(without_starter)
    unknown = quorum_spec()
    unknown["policy"]["rules"][0]["approvers"] = ["group:legal"]
    with pytest.raises(ValidationError, match=r"no group 'legal' in policy.groups"):
        TaskSpec.model_validate(unknown)
    assert TaskSpec.model_validate(quorum_spec()).policy.rules[0].approvers == ["alice", "bob", "carol"]


async def test_a_two_of_three_quorum_ignores_the_starter_and_writes_once_on_the_second_approval(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """The starter's approval and a repeated approver are refused with the reason (by the update, and
    recorded as ignored when signalled) and count for nothing; bob's approval leaves the request
    pending with '1 of 2 approvals: bob' in status and in the CLI, and nothing written; carol's
    executes the write once, and the evidence's decision carries both votes; the history replays."""
    handle = await env.start(quorum_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    assert request.approvers == ["alice", "bob", "carol"] and request.progress == "0 of 2 approvals"

    assert "started this task: their approval does not count" in await refused(handle, STARTER)
    await handle.signal(AgentTaskWorkflow.submit_decision, decision(request, "approve", STARTER))
    assert await decide(handle, "bob") == "approve recorded: 1 of 2 approvals: bob (pending)"
    assert "'bob' already decided request req-1 (approve); each approver counts once" in await refused(
        handle, "bob"
    )

    status = await env.wait_status(handle, lambda s: s.ignored_count == 1)
    [pending] = status.pending
    assert status.phase is TaskPhase.AWAITING_APPROVAL and pending.progress == "1 of 2 approvals: bob"
    assert [v.principal for v in pending.votes] == ["bob"]
    assert "separation of duties" in status.ignored[0].reason and status.ignored[0].principal == STARTER
    assert env.business().count() == 0
    code, out, _ = await run_cli(capsys, "--address", env.address, "status", handle.id)
    assert code == 0 and "quorum:   1 of 2 approvals: bob" in out, out

    await decide(handle, "carol")
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output and result.final_output.startswith("recorded as")
    assert env.business().count() == 1
    [approval] = result.evidence.approvals
    assert (approval.principal, approval.decision) == ("carol", DecisionKind.APPROVE)
    assert [(v.principal, v.decision, v.version) for v in approval.votes] == [
        ("bob", DecisionKind.APPROVE, request.version),
        ("carol", DecisionKind.APPROVE, request.version),
    ]
    await assert_replays(env.client, handle.id)


async def test_a_vote_toward_a_quorum_cannot_be_remembered_nor_answered_by_a_respond(env: TaskEnv) -> None:
    """Under a policy that allows remembered grants, bob's approval with a remember on a quorum
    request is refused whole (a grant stands in for one approver), and so is a respond (one approver
    cannot answer for the others); neither counts."""
    spec = quorum_spec()
    spec["policy"]["grants"] = {}
    handle = await env.start(spec)
    await env.awaiting_approval(handle)
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await decide(handle, "bob", remember={"scope": "agent"})
    assert "quorum cannot be remembered" in str(caught.value.cause)
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await decide(handle, "bob", "respond", reason="use last month's figure")
    assert "needs a quorum" in str(caught.value.cause)
    [request] = (await handle.query(AgentTaskWorkflow.status)).pending
    assert request.votes == []
    await handle.cancel()


async def test_one_rejection_vetoes_a_quorum(env: TaskEnv) -> None:
    """After bob's approval, carol's rejection rejects the action at once: nothing is written, the
    model reads her message, and the decision records both votes; the history replays."""
    handle = await env.start(quorum_spec())
    await env.awaiting_approval(handle)
    await decide(handle, "bob")
    await decide(handle, "carol", "reject", reason="two approvals are not enough for this one")
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output and "two approvals are not enough for this one" in result.final_output
    assert env.business().count() == 0
    [rejection] = result.evidence.approvals
    assert (rejection.principal, rejection.decision) == ("carol", DecisionKind.REJECT)
    assert [v.principal for v in rejection.votes] == ["bob", "carol"]
    await assert_replays(env.client, handle.id)


async def test_without_veto_a_rejection_counts_until_the_quorum_is_out_of_reach(env: TaskEnv) -> None:
    """With veto off and four approvers, carol's rejection leaves the request pending (bob and dave
    can still make 2); dave's then rejects it, since only bob is left: nothing is written; the history
    replays."""
    handle = await env.start(quorum_spec(veto=False, approvers=["alice", "bob", "carol", "dave"]))
    await env.awaiting_approval(handle)
    detail = await decide(handle, "carol", "reject", reason="no")
    assert detail == "reject recorded: 0 of 2 approvals; rejected by carol (pending)"
    assert env.business().count() == 0
    await decide(handle, "dave", "reject", reason="no either")
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.final_output and "no either" in result.final_output
    assert env.business().count() == 0
    [rejection] = result.evidence.approvals
    assert rejection.decision is DecisionKind.REJECT and [v.principal for v in rejection.votes] == [
        "carol",
        "dave",
    ]
    await assert_replays(env.client, handle.id)


async def test_an_escalated_approver_completes_the_quorum_an_earlier_approver_began(env: TaskEnv) -> None:
    """The request's escalation applies to the whole quorum: bob's approval stays counted across it,
    and dave, who may decide only once the request escalates to him, completes it: one write; the
    history replays."""
    spec = quorum_spec(approvers=["alice", "bob"])
    spec["policy"]["rules"][0]["sla"] = {"escalate_after_seconds": 2, "escalate_to": ["dave"]}
    handle = await env.start(spec)
    await env.awaiting_approval(handle)
    await decide(handle, "bob")
    status = await env.wait_status(handle, lambda s: s.pending[0].escalated, within=60)
    assert status.pending[0].approvers == ["alice", "bob", "dave"]
    assert status.pending[0].progress == "1 of 2 approvals: bob"
    assert await decide(handle, "dave") == "approve recorded: 2 of 2 approvals: bob, dave (decided)"
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and env.business().count() == 1
    assert [v.principal for v in result.evidence.approvals[0].votes] == ["bob", "dave"]
    await assert_replays(env.client, handle.id)


async def test_a_worker_sigkilled_between_the_two_approvals_loses_nothing(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """bob approves on a worker process that is then SIGKILLed; a new worker answers status with his
    approval still counted, refuses his second one, and carol's completes the quorum: one write, both
    votes in the evidence; the history replays."""
    env = TaskEnv(client=client, config=make_config(tmp_path / "data"), address=dev_server.address)
    async with worker_process(env, tmp_path / "worker-1.log") as first:
        handle = await env.start(quorum_spec())
        await env.awaiting_approval(handle)
        await decide(handle, "bob")
        await sigkill(first)
    async with worker_process(env, tmp_path / "worker-2.log"):
        status = await env.awaiting_approval(handle)
        assert status.pending[0].progress == "1 of 2 approvals: bob"
        assert "already decided" in await refused(handle, "bob")
        await decide(handle, "carol")
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    log = (tmp_path / "worker-2.log").read_text()[-3000:]
    assert result.phase is TaskPhase.COMPLETED, (result.reason, log)
    assert env.business().count() == 1
    [approval] = result.evidence.approvals
    assert [v.principal for v in approval.votes] == ["bob", "carol"]
    await assert_replays(env.client, handle.id)


def test_the_documented_quorum_example_runs(tmp_path: Path) -> None:
    """docs/approvals.md's runnable quorum block runs as written (its own embedded server and worker):
    alice's approval is refused naming separation of duties, bob's leaves 1 of 2, carol's completes
    the task with both votes in its evidence."""
    [block] = [b for b in runnable_blocks(REPO / "docs" / "approvals.md") if '"quorum"' in b]
    script = tmp_path / "quorum_example.py"
    script.write_text(block)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    alice, bob, outcome = done.stdout.splitlines()
    assert alice.startswith("alice: principal 'alice' started this task") and "separation of duties" in alice
    assert bob == "bob: approve recorded: 1 of 2 approvals: bob (pending)"
    assert outcome == "completed - ['bob', 'carol']"
