"""Own functions as durable effect tools (``effect_tool``): an existing async function with a side
effect runs as its own ``tool.call`` activity after approval, with the operation key in its declared
parameter; a worker killed between its commit and the activity's completion leaves one effect (the
retry's lookup finds it); a rejected call leaves none; a refusal reaches the model; a function that
keeps failing hands the task off with its key named."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.schemas.writes import operation_key
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client

from tests.helpers.own_tools import archive_store, invoices
from tests.helpers.support import (
    TEST_AGENTS,
    DevServer,
    TaskEnv,
    assert_replays,
    make_config,
    run_cli,
    running_worker,
    spawn_worker,
)

AGENTS = [*TEST_AGENTS, "tests.helpers.own_tools:registrations"]


def invoice_spec(agent: str = "invoicer") -> dict:
    return {
        "agent": agent,
        "prompt": "Invoice acme for 12.00",
        "policy": {"default_approvers": ["finance-lead"]},
    }


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.db"
    monkeypatch.setenv("AW_LEDGER", str(path))
    monkeypatch.setenv("AW_LEDGER_MARKS", str(tmp_path / "marks"))
    return path


def own_env(client: Client, dev_server: DevServer, tmp_path: Path) -> TaskEnv:
    config = make_config(tmp_path / "data", agents=AGENTS)
    return TaskEnv(client=client, config=config, address=dev_server.address)


async def _decide(env: TaskEnv, handle, decision: str, **extra) -> None:  # type: ignore[no-untyped-def]
    [request] = (await env.awaiting_approval(handle)).pending
    assert request.action.tool == "create_invoice"
    assert request.action.effect.value == "write"
    outcome = await handle.execute_update(
        AgentTaskWorkflow.decide,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": decision,
            "principal": "finance-lead",
            **extra,
        },
    )
    assert outcome.accepted is True


def _activity_types(history_json: str) -> list[str]:
    return [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in json.loads(history_json)["events"]
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    ]


async def test_an_approved_own_function_runs_once_as_its_own_activity_with_the_key_injected(
    client: Client,
    dev_server: DevServer,
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Approved, the function runs as a `tool.call` activity on the business queue; the ledger row
    carries the operation key the workflow derived; evidence and events name the call, and `verify`
    checks its stored arguments and output."""
    env = own_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(invoice_spec())
        await _decide(env, handle, "approve")
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        status = await handle.query(AgentTaskWorkflow.status)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [effect] = result.evidence.tool_effects
    [(key, customer, amount)] = invoices(ledger)
    assert (customer, amount) == ("acme", 1200)
    assert key == effect.operation_key
    assert effect.source == "function" and effect.target == "billing" and not effect.replayed
    # The task's run chain: its first run (it continued as new as its wait for a person began).
    first_run = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
    assert key == operation_key(handle.id, effect.call_id, first_run)
    output = json.loads(env.store().get(effect.output_digest))
    assert output["customer"] == "acme" and output["amount_cents"] == 1200
    events = [e for e in status.last_events if e.type.value == "tool.effect"]
    assert events and events[-1].data["operation_key"] == key
    history = await assert_replays(client, handle.id)
    assert _activity_types(history).count("tool.call") == 1

    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    bundle = tmp_path / "bundle"
    code, out, err = await run_cli(capsys, "--address", env.address, "evidence", handle.id, "-o", str(bundle))
    assert code == 0, err
    code, out, _ = await run_cli(capsys, "verify", str(bundle))
    assert code == 0, out
    assert f"ok  tool call create_invoice {effect.call_id} (function tool, {key})" in out
    copy = bundle / "artifacts" / effect.output_digest.split(":", 1)[1]
    copy.write_bytes(copy.read_bytes().replace(b"1200", b"12000"))
    code, out, _ = await run_cli(capsys, "verify", str(bundle))
    assert code == 1
    [failed] = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failed.startswith(f"FAIL tool call create_invoice {effect.call_id}") and "output" in failed


async def test_sigkill_between_the_functions_commit_and_its_completion_leaves_one_effect(
    client: Client, dev_server: DevServer, tmp_path: Path, ledger: Path
) -> None:
    """The worker dies right after the function committed; the next worker's retry asks the lookup
    first, finds the invoice, and does not book it again."""
    env = own_env(client, dev_server, tmp_path)
    first = spawn_worker(env, tmp_path / "worker-1.log", AW_LEDGER_FAULT="kill")
    handle = await env.start(invoice_spec())
    await _decide(env, handle, "approve")
    assert await asyncio.to_thread(first.wait, 60) == -signal.SIGKILL
    assert len(invoices(ledger)) == 1
    second = spawn_worker(env, tmp_path / "worker-2.log")
    try:
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [effect] = result.evidence.tool_effects
    assert effect.replayed is True  # found by the retry's lookup, not booked again
    [(key, _, _)] = invoices(ledger)
    assert key == effect.operation_key
    await assert_replays(client, handle.id)


async def test_a_rejected_own_function_call_leaves_no_effect(
    client: Client, dev_server: DevServer, tmp_path: Path, ledger: Path
) -> None:
    """Rejected, the function never runs: no row, no `tool.call` activity, and the model hears why."""
    env = own_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(invoice_spec())
        await _decide(env, handle, "reject", reason="wrong customer")
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert invoices(ledger) == [] and result.evidence.tool_effects == []
    history = await assert_replays(client, handle.id)
    assert "tool.call" not in _activity_types(history)


async def test_an_edited_call_runs_with_the_approvers_arguments(
    client: Client, dev_server: DevServer, tmp_path: Path, ledger: Path
) -> None:
    """The approver changes the amount: the function books the edited amount, once."""
    env = own_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(invoice_spec())
        await _decide(env, handle, "edit", edited_args={"amount_cents": 900})
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert [(c, a) for _, c, a in invoices(ledger)] == [("acme", 900)]


async def test_a_tool_error_reaches_the_model_and_nothing_is_booked(
    client: Client, dev_server: DevServer, tmp_path: Path, ledger: Path
) -> None:
    """The function refuses the call with `ToolError`: not retried, the model sees the message, the
    evidence marks the call as an error."""
    env = own_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(invoice_spec("bad-invoicer"))
        await _decide(env, handle, "approve")
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [effect] = result.evidence.tool_effects
    assert effect.is_error is True
    assert b"amount_cents must be positive" in env.store().get(effect.output_digest)
    assert invoices(ledger) == []


async def test_a_function_that_keeps_failing_hands_the_task_off_naming_its_key(
    client: Client, dev_server: DevServer, tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every attempt raises (the billing system is down): after the tool's 3 attempts the outcome is
    unknown, and the task hands off naming the tool and its operation key."""
    monkeypatch.setenv("AW_LEDGER_FAULT", "fail")
    env = own_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(invoice_spec())
        await _decide(env, handle, "approve")
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and "create_invoice" in result.reason and "op-" in result.reason
    assert "3 attempt" in result.reason and "billing is down" in result.reason
    assert invoices(ledger) == []


async def test_a_write_names_its_business_system_and_lands_there_only(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """Two business systems on one worker: a write tool's `BusinessWrite(system="archive")` is
    written to, and confirmed by lookup in, the archive system; the default system stays empty."""
    config = make_config(
        tmp_path / "data",
        agents=AGENTS,
        business_systems={"archive": "tests.helpers.own_tools:archive_store"},
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, env.config):
        handle = await env.start({**invoice_spec("archiver"), "prompt": "archive v1"})
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [write] = result.evidence.writes
    assert write.system == "archive" and write.confirmed is True
    assert archive_store(config).lookup(write.operation_key) is not None
    assert env.business().lookup(write.operation_key) is None


async def test_a_write_to_a_system_the_worker_lacks_hands_off_naming_it(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """No worker registers the system a write names: the write is not retried and the task hands
    off, naming the system and the ones there are."""
    env = own_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start({**invoice_spec("archiver"), "prompt": "archive v1"})
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and "no business system named 'archive'" in result.reason
