"""Bad decisions change nothing: the signal records them as ignored with a reason; the update
`decide` refuses them with a clear error before anything reaches history."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import WorkflowUpdateFailedError

from tests.helpers.support import TaskEnv, example_spec

STALE = "sha256:" + "0" * 64


def bad_decisions(request_id: str, version: str) -> list[tuple[dict[str, Any], str]]:
    """(decision, words the reason must contain) for each way a decision can be wrong."""
    ok = {"request_id": request_id, "version": version, "decision": "approve", "principal": "finance-lead"}
    return [
        ({**ok, "version": STALE}, "stale version"),
        ({**ok, "request_id": "req-99"}, "unknown request 'req-99'"),
        ({**ok, "principal": "intern"}, "principal 'intern' may not decide"),
        ({k: v for k, v in ok.items() if k != "version"}, "version: Field required"),
        ({**ok, "decision": "edit"}, "edited_args is required"),
    ]


async def test_signal_decisions_that_are_wrong_are_ignored_with_reasons(env: TaskEnv) -> None:
    """Stale version, unknown request, disallowed principal and malformed payloads are each
    recorded as ignored with their reason; the task still waits and nothing was decided."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    cases = bad_decisions(request.request_id, request.version)
    for decision, _ in cases:
        await handle.signal(AgentTaskWorkflow.submit_decision, decision)
    status = await env.wait_status(handle, lambda s: len(s.ignored) == len(cases))
    for (_, words), ignored in zip(cases, status.ignored, strict=True):
        assert words in ignored.reason
        assert ignored.via == "signal"
    assert status.phase is TaskPhase.AWAITING_APPROVAL
    assert [r.request_id for r in status.pending] == [request.request_id]
    assert any(e.type.value == "approval.ignored" for e in status.last_events)
    # The right decision still works afterwards.
    await handle.signal(
        AgentTaskWorkflow.submit_decision,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "approve",
            "principal": "finance-lead",
        },
    )
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    assert [a.principal for a in result.evidence.approvals] == ["finance-lead"]
    assert env.business().count() == 1


async def test_update_refuses_wrong_decisions_before_history(env: TaskEnv) -> None:
    """`decide` rejects each wrong decision with an error naming what is wrong, and none of them
    leaves an update event in the history."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    for decision, words in bad_decisions(request.request_id, request.version):
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await handle.execute_update(AgentTaskWorkflow.decide, decision)
        assert words in str(caught.value.cause)
    history = await handle.fetch_history()
    update_events = [
        e for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert update_events == []
    status = await env.wait_status(handle, lambda s: True)
    assert status.phase is TaskPhase.AWAITING_APPROVAL and status.ignored == []
    await env.cancel(handle)


async def test_cli_refuses_a_disallowed_principal(env: TaskEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """`agent-worker approve --as intern` exits 1 and says who may decide."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    args = [
        "--address",
        env.address,
        "approve",
        handle.id,
        "--request",
        request.request_id,
        "--version",
        request.version,
    ]
    code = await asyncio.to_thread(cli_main, [*args, "--as", "intern"])
    assert code == 1
    assert "allowed: finance-lead" in capsys.readouterr().err
    code = await asyncio.to_thread(cli_main, [*args, "--as", "finance-lead"])
    assert code == 0
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
