"""The public face: `agent_worker` exports exactly its pinned names, and `AgentWorkerClient` drives
a task through start, pending, decide (update and signal) and result against a real worker, with
its own errors when the task refuses a decision or no worker answers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import agent_worker
import agent_worker.testing
from agent_worker import (
    AgentWorkerClient,
    AwaitingTask,
    DecisionKind,
    DecisionRefused,
    TaskEnded,
    TaskPhase,
    WorkerUnreachable,
)
from tests.helpers.support import TaskEnv, example_spec

STALE = "sha256:" + "0" * 64

PUBLIC = {
    "Agent", "AgentRegistration", "AgentWorkerClient", "AgentWorkerError", "AgentWorkerPlugin",
    "ApprovalDecision",
    "ApprovalRequest", "AwaitingTask", "Budgets", "BusinessWrite", "ConversationModel", "DecisionKind",
    "Decision",
    "DecisionOutcome", "DecisionRefused", "Delegation", "Event", "EventType", "Evidence", "InputFile",
    "InvalidDecision",
    "McpRules", "McpWrite", "ToolError", "effect_tool", "OverlapPolicy", "PolicyRule", "PolicySpec",
    "ProposedAction", "ScheduleExists", "ScheduleNotFound", "ScheduleView", "TaskSchedule",
    "SandboxCommand", "TaskEnded", "TaskInput",
    "TaskNotFound", "TaskPhase", "TaskRef", "TaskResult", "TaskSpec", "TaskStatus", "WorkerUnreachable",
    "ask_human", "current_turn", "delegate_tool", "first_user_text", "function_tool", "is_digest",
    "sandbox_tool", "tool_outputs", "write_tool", "memory_tools",
}  # fmt: skip
TESTING = {"ConversationModel", "Script", "assistant_message", "function_call", "local_worker"}


def test_the_public_face_exports_exactly_its_pinned_names_and_each_imports() -> None:
    """`__all__` of `agent_worker` and `agent_worker.testing` are the pinned lists, with no
    duplicate, and every name resolves."""
    for module, pinned in ((agent_worker, PUBLIC), (agent_worker.testing, TESTING)):
        assert sorted(module.__all__) == sorted(pinned)
        assert len(module.__all__) == len(set(module.__all__))
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_old_import_paths_still_give_the_same_objects() -> None:
    """The author API re-exported by `agent_worker` is the very object the internal modules hold."""
    from agent_worker.activities.agent import AgentRegistration, write_tool
    from agent_worker.schemas.tasks import TaskSpec

    assert agent_worker.AgentRegistration is AgentRegistration
    assert agent_worker.write_tool is write_tool
    assert agent_worker.TaskSpec is TaskSpec


async def _awaiting_until_listed(client: AgentWorkerClient, task_id: str, **by: str) -> AwaitingTask:
    """Visibility is eventually consistent: poll `awaiting` until the task is listed."""
    deadline = time.monotonic() + 30
    while True:
        found = [t for t in await client.awaiting(**by) if t.task_id == task_id]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"{task_id} never listed as awaiting {by}"
        await asyncio.sleep(0.3)


async def test_a_task_runs_start_pending_decide_by_update_and_result_through_the_client(env: TaskEnv) -> None:
    """Started twice under one id it is one task; it is found awaiting its approver in its tenant,
    and an approval by update completes it with the approval in its evidence."""
    client = AgentWorkerClient(env.client, env.task_queue)
    task = await client.start(example_spec(), task_id="face-update")
    again = await client.start(example_spec(), task_id="face-update")
    assert task.started and not again.started
    request = await client.next_request(task.task_id)
    assert [r.request_id for r in await client.pending(task.task_id)] == [request.request_id]
    listed = await _awaiting_until_listed(client, task.task_id, principal="finance-lead", tenant="acme")
    assert [r.request_id for r in listed.requests] == [request.request_id]
    assert task.task_id not in [t.task_id for t in await client.awaiting(principal="intern")]
    outcome = await client.decide(
        task.task_id, request.request_id, DecisionKind.APPROVE, "finance-lead", version=request.version
    )
    assert outcome is not None and outcome.accepted
    result = await asyncio.wait_for(client.result(task.task_id), 60)
    assert result.phase is TaskPhase.COMPLETED
    assert [a.principal for a in result.evidence.approvals] == ["finance-lead"]
    assert env.business().count() == 1


async def test_a_decision_sent_as_a_signal_completes_the_task(env: TaskEnv) -> None:
    """By signal, `decide` returns nothing and the task applies the decision when it runs."""
    client = AgentWorkerClient(env.client, env.task_queue)
    task = await client.start(example_spec())
    request = await client.next_request(task.task_id)
    sent = await client.decide(task.task_id, request.request_id, "approve", "finance-lead", via="signal")
    assert sent is None
    result = await asyncio.wait_for(client.result(task.task_id), 60)
    assert result.phase is TaskPhase.COMPLETED
    assert [a.request_id for a in result.evidence.approvals] == [request.request_id]


async def test_a_refused_decision_raises_decision_refused_naming_why(env: TaskEnv) -> None:
    """A principal the policy does not allow and a stale version are refused by the task, and the
    error carries its reason; the task still waits for the right decision, takes follow-up input,
    and once cancelled has no result to give."""
    client = AgentWorkerClient(env.client, env.task_queue)
    task = await client.start(example_spec())
    request = await client.next_request(task.task_id)
    with pytest.raises(DecisionRefused) as caught:
        await client.decide(task.task_id, request.request_id, "approve", "intern")
    assert "principal 'intern' may not decide" in caught.value.reason
    assert caught.value.request_id == request.request_id
    with pytest.raises(DecisionRefused, match="stale version"):
        await client.decide(task.task_id, request.request_id, "approve", "finance-lead", version=STALE)
    with pytest.raises(DecisionRefused, match="not pending"):
        await client.decide(task.task_id, "req-99", "approve", "finance-lead")
    status = await client.status(task.task_id)
    assert status.phase is TaskPhase.AWAITING_APPROVAL
    assert [r.request_id for r in status.pending] == [request.request_id]
    await client.say(task.task_id, "use the audited figures", principal="finance-lead")
    await env.wait_status(
        client.handle(task.task_id), lambda s: any(e.type.value == "input.added" for e in s.last_events)
    )
    await client.cancel(task.task_id)
    with pytest.raises(TaskEnded):
        await asyncio.wait_for(client.result(task.task_id), 60)
    await env.cancel(client.handle(task.task_id))


async def test_deciding_with_no_worker_polling_raises_worker_unreachable_within_its_wait(
    config_env: TaskEnv,
) -> None:
    """With no worker on the task queue, `decide` gives up after its wait with an error saying no
    worker answered, naming the queue, and that the decision was not applied."""
    client = AgentWorkerClient(config_env.client, config_env.task_queue)
    task = await client.start(example_spec())
    try:
        with pytest.raises(WorkerUnreachable) as caught:
            await asyncio.wait_for(
                client.decide(
                    task.task_id, "req-1", "approve", "finance-lead", version=STALE, wait_seconds=2
                ),
                60,
            )
        message = str(caught.value)
        assert "no worker answered the decision" in message
        assert config_env.task_queue in message and "not applied" in message
        with pytest.raises(WorkerUnreachable, match="no worker answered the query"):
            await asyncio.wait_for(client.status(task.task_id, wait_seconds=2), 60)
    finally:
        await client.handle(task.task_id).terminate("test over")


async def test_a_decision_signed_with_the_principals_key_is_accepted_where_the_policy_requires_it(
    env: TaskEnv, tmp_path: Path
) -> None:
    """Under a policy requiring signatures, an unsigned decision is refused and one made with
    `sign_with` (over the pending request's run chain) completes the task."""
    from agent_worker.security.signing import new_private_key, public_key_text

    key = new_private_key("finance-lead", tmp_path)
    spec = example_spec()
    spec["policy"].update(signers={"finance-lead": public_key_text(key)}, require_signatures=True)
    client = AgentWorkerClient(env.client, env.task_queue)
    task = await client.start(spec)
    request = await client.next_request(task.task_id)
    with pytest.raises(DecisionRefused, match="a signature is required"):
        await client.decide(task.task_id, request.request_id, "approve", "finance-lead")
    outcome = await client.decide(task.task_id, request.request_id, "approve", "finance-lead", sign_with=key)
    assert outcome is not None and outcome.accepted
    result = await asyncio.wait_for(client.result(task.task_id), 60)
    assert result.phase is TaskPhase.COMPLETED
