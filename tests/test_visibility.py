"""Tasks waiting for a human are findable: through search attributes (the Temporal CLI and UI), the
`inbox` command, the `status` query, and the UI's current details."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from agent_worker.cli.devserver import temporal_binary
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.tasks import MIN_EVENTS_BEFORE_WAIT
from agent_worker.schemas.visibility import AWAITING_QUERY
from temporalio.api.sdk.v1 import WorkflowMetadata

from tests.helpers.support import TaskEnv, example_spec, running_worker

DOCS = Path(__file__).parents[1] / "docs" / "approvals.md"


def listed_ids(env: TaskEnv, query: str) -> list[str]:
    """Workflow ids `temporal workflow list --query QUERY` prints, one per run it lists."""
    listed = subprocess.run(
        [temporal_binary(), "workflow", "list", "--address", env.address, "--query", query, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [w["execution"]["workflowId"] for w in json.loads(listed.stdout or "[]")]


async def test_a_waiting_task_is_found_by_search_attributes_inbox_and_status(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """`temporal workflow list --query` finds it by phase, tenant and approver; `inbox --json` and
    `status --json` give the request id and version a human needs; the current details say what
    it waits for."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending

    query = (
        "AgentAwaitingApproval = true AND AgentTaskPhase = 'awaiting_approval' "
        "AND AgentTenant = 'acme' AND AgentApprovers = 'finance-lead' AND AgentName = 'monthly-report'"
    )
    found: list[str] = []
    for _ in range(50):  # visibility is eventually consistent
        found = await asyncio.to_thread(listed_ids, env, query)
        if handle.id in found:
            break
        await asyncio.sleep(0.2)
    assert handle.id in found

    assert await asyncio.to_thread(cli_main, ["--address", env.address, "inbox", "--json"]) == 0
    inbox = json.loads(capsys.readouterr().out)
    [entry] = [e for e in inbox if e["task_id"] == handle.id]
    assert [(p["request_id"], p["version"]) for p in entry["pending"]] == [
        (request.request_id, request.version)
    ]

    assert await asyncio.to_thread(cli_main, ["--address", env.address, "status", handle.id, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["phase"] == "awaiting_approval"
    assert status["pending"][0]["version"] == request.version
    assert status["budgets"]["max_turns"] == 8

    assert await asyncio.to_thread(cli_main, ["--address", env.address, "status", handle.id]) == 0
    text = capsys.readouterr().out
    assert "temporal workflow signal" in text and request.version in text

    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "Waiting for approval" in metadata.current_details
    assert request.request_id in metadata.current_details and "finance-lead" in metadata.current_details
    await env.cancel(handle)


async def test_the_documented_query_lists_a_task_that_waits_in_a_short_run_once(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task that continued as new before its wait leaves a closed run that still carries
    ``AgentAwaitingApproval = true``: the attribute alone lists the task twice. The query
    docs/approvals.md shows (the client's ``AWAITING_QUERY``, running runs only) lists it once, and
    so does the inbox."""
    handle = await env.start({**example_spec(), "continue_as_new_before_wait": MIN_EVENTS_BEFORE_WAIT})
    await env.awaiting_approval(handle)
    documented = "AgentAwaitingApproval = true AND ExecutionStatus = 'Running'"
    assert documented == AWAITING_QUERY and f'--query "{documented}"' in DOCS.read_text()
    bare: list[str] = []
    for _ in range(100):  # visibility is eventually consistent
        bare = [
            i
            for i in await asyncio.to_thread(listed_ids, env, "AgentAwaitingApproval = true")
            if i == handle.id
        ]
        if len(bare) == 2:
            break
        await asyncio.sleep(0.2)
    assert len(bare) == 2, "the closed run before the wait still carries the attribute"
    assert [i for i in await asyncio.to_thread(listed_ids, env, documented) if i == handle.id] == [handle.id]
    assert await asyncio.to_thread(cli_main, ["--address", env.address, "inbox", "--json"]) == 0
    assert [e["task_id"] for e in json.loads(capsys.readouterr().out)].count(handle.id) == 1
    await env.cancel(handle)


async def test_inbox_lists_a_task_whose_worker_is_gone(
    config_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A waiting task whose workers all died is still in the inbox, from visibility, marked as
    unanswered, and the inbox does not hang on it."""
    env = config_env
    async with running_worker(env.client, env.config):
        handle = await env.start(example_spec())
        await env.awaiting_approval(handle)
    entries: list[dict] = []
    for _ in range(50):
        assert await asyncio.to_thread(cli_main, ["--address", env.address, "inbox", "--json"]) == 0
        entries = [e for e in json.loads(capsys.readouterr().out) if e["task_id"] == handle.id]
        if entries and "error" in entries[0]:
            break
        await asyncio.sleep(0.2)
    [entry] = entries
    assert entry["approvers"] == ["finance-lead"] and entry["tenant"] == "acme"
    assert "no worker answered" in entry["error"]
    async with running_worker(env.client, env.config):
        await env.cancel(handle)
