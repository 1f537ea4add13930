"""Conditional policy against the dev server: a rule's CEL condition over the action's arguments, the
agent, the tenant and the labels decides real writes; a deny rule's reason reaches the model; a rule
whose condition does not compile is refused at start, by the client, the CLI, the workflow,
`mcp-serve` and `schedule create`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.events import JsonlEventSink
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.tasks import PolicyVerdict, TaskPhase, TaskResult
from pydantic import ValidationError
from temporalio.client import WorkflowFailureError

from agent_worker.client import AgentWorkerClient
from tests.helpers.support import TaskEnv, assert_replays

LIMIT_RULES = [
    {
        "tool": "record_value",
        "when": 'int(args.value) <= 1000 && agent == "recorder" && tenant == "default" '
        '&& labels.team == "finance"',
        "decision": "allow",
        "reason": "small amounts need nobody",
    },
    {"tool": "record_value", "decision": "require_approval", "approvers": ["finance-lead"]},
]


def recording(amount: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """A task whose agent proposes one write of ``amount`` under ``rules``."""
    return {
        "agent": "recorder",
        "prompt": f"record: {amount}",
        "labels": {"team": "finance"},
        "policy": {"rules": rules},
    }


def decided(env: TaskEnv, task_id: str) -> list[dict[str, Any]]:
    """The task's ``policy.decided`` events' data, as the event sink holds them."""
    events = JsonlEventSink(env.config.events_dir).read(task_id)
    return [e.data for e in events if e.type.value == "policy.decided"]


async def test_an_argument_condition_allows_a_small_write_without_asking(env: TaskEnv) -> None:
    """Amount 50 satisfies the allow rule's condition: the write commits with no approval request,
    and the policy decision names the rule's reason."""
    handle = await env.start(recording("50", LIMIT_RULES))
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output and result.final_output.startswith("recorded as")
    assert result.evidence.approvals == [] and env.business().count() == 1
    assert [(d["verdict"], d["reason"]) for d in decided(env, handle.id)] == [
        (PolicyVerdict.ALLOW.value, "small amounts need nobody")
    ]
    await assert_replays(env.client, handle.id)


async def test_an_argument_condition_sends_a_large_write_for_approval(env: TaskEnv) -> None:
    """Amount 5000 fails the allow rule's condition, so the next rule asks finance-lead; nothing is
    written until the approval, then the write commits once."""
    handle = await env.start(recording("5000", LIMIT_RULES))
    status = await env.awaiting_approval(handle)
    [request] = status.pending
    assert request.approvers == ["finance-lead"] and request.action.arguments == {"value": "5000"}
    assert env.business().count() == 0
    await env.approve(handle, "finance-lead")
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert [a.principal for a in result.evidence.approvals] == ["finance-lead"]
    assert env.business().count() == 1
    await assert_replays(env.client, handle.id)


async def test_a_deny_rules_reason_reaches_the_model(env: TaskEnv) -> None:
    """A deny rule whose condition matches the argument stops the write, and the model's next turn
    reads the rule's reason as the tool's output."""
    rules = [
        {
            "tool": "record_value",
            "when": 'args.value.startsWith("secret-")',
            "decision": "deny",
            "reason": "secret values are never recorded",
        },
        {"tool": "record_value", "decision": "allow"},
    ]
    handle = await env.start(recording("secret-42", rules))
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "not recorded: denied by policy: secret values are never recorded"
    assert env.business().count() == 0
    await assert_replays(env.client, handle.id)


async def test_a_condition_that_cannot_be_evaluated_asks_a_person(env: TaskEnv) -> None:
    """'lots' is no integer: the allow rule's condition errors, so the write is not allowed but put
    to the policy's default approver, and the recorded reason names the rule and the error."""
    spec = recording("lots", LIMIT_RULES[:1])
    spec["policy"]["default_approvers"] = ["finance-lead"]
    handle = await env.start(spec)
    [request] = (await env.awaiting_approval(handle)).pending
    assert request.approvers == ["finance-lead"]
    await env.cancel(handle)
    [data] = decided(env, handle.id)
    assert data["verdict"] == PolicyVerdict.REQUIRE_APPROVAL.value
    assert data["reason"].startswith("policy rule 0: its condition could not be evaluated (")
    assert env.business().count() == 0


BAD_RULES = [
    {"tool": "record_value", "decision": "allow"},
    {"tool": "record_value", "when": "arg.value == '1'", "decision": "deny"},
]


async def test_a_bad_rule_is_refused_at_start_naming_the_rule(
    env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A condition with an unknown name is refused before any write could meet it: the client
    raises naming rule 1 and the name, the CLI exits 2 saying the same and starts nothing, and
    the same spec sent raw ends the workflow at once with a non-retryable InvalidTaskInput."""
    spec = recording("50", BAD_RULES)
    client = AgentWorkerClient(env.client, env.task_queue)
    with pytest.raises(ValidationError, match=r"policy\.rules\.1[\s\S]*undeclared reference to 'arg'"):
        await client.start(spec, "bad-rule-client")
    path = tmp_path / "task.json"
    path.write_text(json.dumps(spec))
    argv = ["--address", env.address, "start", str(path), "--id", "bad-rule-cli"]
    argv += ["--task-queue", env.task_queue]
    assert await asyncio.to_thread(cli_main, argv) == 2
    assert "policy.rules.1" in (err := capsys.readouterr().err) and "'arg'" in err
    for task_id in ("bad-rule-client", "bad-rule-cli"):
        assert (await env.client.count_workflows(f"WorkflowId = '{task_id}'")).count == 0
    handle = await env.start(spec, task_id="bad-rule-raw")
    with pytest.raises(WorkflowFailureError) as caught:
        await asyncio.wait_for(handle.result(), 30)
    cause = caught.value.cause
    assert getattr(cause, "type", None) == "InvalidTaskInput" and getattr(cause, "non_retryable", False)
    assert "spec.policy.rules.1" in str(cause) and "undeclared reference to 'arg'" in str(cause)


async def test_a_server_or_schedule_given_a_bad_rule_stops_at_start_naming_the_rule(
    env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The long-lived holders of a task spec check its rules as they start, not at a write:
    `agent-worker mcp-serve --tool NAME=SPEC.json` (its own process, as an operator runs it) exits 2
    naming the rule and the bad name before it serves, and `schedule create` exits 2 the same way
    and creates no schedule."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(recording("50", BAD_RULES)))
    served = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_worker.cli.main", "--address", env.address, "mcp-serve",
        "--tool", f"recorder={path}", "--task-queue", env.task_queue,
        env=env.worker_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(served.communicate(), 60)
    assert served.returncode == 2, (out, err)
    assert b"policy.rules.1" in err and b"undeclared reference to 'arg'" in err and b"recorder" in err
    argv = ["--address", env.address, "schedule", "create", "bad-rule-schedule", str(path), "--every", "2s"]
    assert await asyncio.to_thread(cli_main, [*argv, "--task-queue", env.task_queue]) == 2
    said = capsys.readouterr().err
    assert "policy.rules.1" in said and "undeclared reference to 'arg'" in said
    schedules = [s.id async for s in await env.client.list_schedules()]
    assert not [s for s in schedules if "bad-rule-schedule" in s]
