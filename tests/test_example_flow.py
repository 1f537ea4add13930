"""The monthly-report example end to end on a real dev server: approve (by the official `temporal`
CLI), edit, reject."""

from __future__ import annotations

import asyncio
import json
import subprocess
from decimal import Decimal

from agent_worker.cli.devserver import temporal_binary
from agent_worker.schemas.digests import digest_bytes
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.schemas.writes import operation_key
from agent_worker.workflows import AgentTaskWorkflow

from agent_worker.client import DECISION_SIGNAL
from tests.helpers.support import REPO, TaskEnv, assert_replays, example_spec

SHEETS = sorted((REPO / "examples" / "monthly_report" / "sheets").glob("*.csv"))
EXPECTED_TOTAL = "9633.99"


def temporal_cli_signal(env: TaskEnv, task_id: str, decision: dict[str, str]) -> None:
    subprocess.run(
        [
            temporal_binary(),
            "workflow",
            "signal",
            "--address",
            env.address,
            "--workflow-id",
            task_id,
            "--name",
            DECISION_SIGNAL,
            "--input",
            json.dumps(decision),
        ],  # fmt: skip
        check=True,
        capture_output=True,
        timeout=30,
    )


async def test_approval_by_temporal_cli_completes_with_evidence(env: TaskEnv) -> None:
    """Started, waits for finance-lead, a `temporal workflow signal` approval completes it, and the
    result carries input digests, the report artifact, the sandbox record, the approval and a write
    receipt confirmed by lookup."""
    handle = await env.start(example_spec())
    await env.parked(handle)  # before the first query: its committed history counts round trips
    status = await env.awaiting_approval(handle)
    [request] = status.pending
    assert request.approvers == ["finance-lead"]
    assert request.action.tool == "submit_report"

    await asyncio.to_thread(
        temporal_cli_signal,
        env,
        handle.id,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "approve",
            "principal": "finance-lead",
        },
    )
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.phase is TaskPhase.COMPLETED
    evidence = result.evidence
    assert evidence.missing == []
    # Inputs: the three sheets, by their real digests.
    assert {(a.name, a.digest) for a in evidence.inputs} == {
        (p.name, digest_bytes(p.read_bytes())) for p in SHEETS
    }
    # The sandbox computed the total from the sheets.
    [command] = evidence.commands
    assert command.exit_code == 0 and not command.timed_out
    assert json.loads(command.stdout)["total"] == EXPECTED_TOTAL
    assert env.store().get(command.stdout_artifact.digest).decode() == command.stdout
    # The report artifact exists in the store under its digest and carries the total.
    [report] = evidence.artifacts
    assert EXPECTED_TOTAL in env.store().get(report.digest).decode()
    # The approval record binds principal and version.
    [approval] = evidence.approvals
    assert (approval.principal, approval.version, approval.decision.value) == (
        "finance-lead",
        request.version,
        "approve",
    )
    # The write: once, under the operation key derived from task id, run chain and call id, confirmed
    # by lookup.
    [write] = evidence.writes
    assert write.operation_key == operation_key(
        handle.id, request.action.call_id, handle.first_execution_run_id
    )
    assert write.confirmed is True
    assert env.business().count() == 1
    assert env.business().lookup(write.operation_key).payload_digest == write.receipt.payload_digest
    assert result.final_output and EXPECTED_TOTAL in result.final_output
    await assert_replays(env.client, handle.id)


async def test_edit_writes_the_edited_arguments_and_records_both_versions(env: TaskEnv) -> None:
    """An edit approves with changed arguments: the write carries them, the edited action gets its own
    version beside the original, and the model is told the arguments changed."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    outcome = await handle.execute_update(
        AgentTaskWorkflow.decide,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "edit",
            "principal": "finance-lead",
            "edited_args": {"total": "9600.00"},
            "reason": "round down per finance policy",
        },
    )
    assert outcome.accepted is True
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    [approval] = result.evidence.approvals
    assert approval.edited_version and approval.edited_version != approval.version
    [write] = result.evidence.writes
    stored = env.business().lookup(write.operation_key)
    assert stored is not None and stored.payload_digest == write.receipt.payload_digest
    # The edited argument reached the executed write...
    assert env.business().payload(write.operation_key)["total"] == "9600.00"
    # ...and the model (it quotes the note it was given with the result).
    assert result.final_output and "approver changed the arguments" in result.final_output
    assert "9600.00" in result.final_output
    assert Decimal("9600.00") != Decimal(EXPECTED_TOTAL)
    await assert_replays(env.client, handle.id)


async def test_reject_shows_the_model_the_message_and_writes_nothing(env: TaskEnv) -> None:
    """A rejection's message reaches the model, the task ends `rejected` (the example's policy), and
    no business write happens."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    message = "Q4 numbers are still being audited; do not file yet"
    await handle.signal(
        AgentTaskWorkflow.submit_decision,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "reject",
            "principal": "finance-lead",
            "reason": message,
        },
    )
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.REJECTED
    assert result.final_output and message in result.final_output  # the model saw it
    assert result.evidence.writes == []
    assert env.business().count() == 0
    [approval] = result.evidence.approvals
    assert approval.decision.value == "reject" and approval.reason == message
    await assert_replays(env.client, handle.id)
