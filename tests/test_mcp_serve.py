"""Agents as MCP tools: `agent-worker mcp-serve` in its own process (as docs/mcp-serve.md runs it)
against the real dev server and a worker, called by the official `mcp` client over Streamable HTTP.
A call starts a durable task and answers the approval it waits for; the same call again starts
nothing; once decided, `task_result` answers the task's result. Without a token nothing is
answered; a principal the policy does not name, another tenant's task and a flood of waiting calls
are refused with the reason; a body over the API's cap is refused before it is read."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from agent_worker.api.mcp_tools import MCP_PATH
from agent_worker.examples import EXAMPLES
from agent_worker.schemas.visibility import STATUS_QUERY
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from temporalio.service import RPCError, RPCStatusCode

from tests.helpers.serving import serving_process
from tests.helpers.support import REPO, TaskEnv, example_spec

LEAD = "lead-mcp-4b1e9c2d7a"
ANALYST = "analyst-mcp-8f3a6d1c0e"
TOKENS = {LEAD: "finance-lead", ANALYST: "analyst"}
TENANTS = {"finance-lead": ["acme"], "analyst": ["acme"]}
DOC_BLOCK = re.compile(r"^```python mcp-serve-client\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@contextlib.asynccontextmanager
async def mcp_serve(env: TaskEnv, tmp_path: Path, **settings: str) -> AsyncIterator[str]:
    """`agent-worker mcp-serve --tool monthly_report=<the example's task.json>`; its MCP URL."""
    command = ["mcp-serve", "--tool", f"monthly_report={EXAMPLES['monthly-report']}"]
    async with serving_process(
        env, tmp_path, command, tokens=TOKENS, tenants=TENANTS, ready_path=MCP_PATH, **settings
    ) as (url, _):
        yield f"{url}{MCP_PATH}"


@contextlib.asynccontextmanager
async def session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session, with ``token`` as its bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def exists(env: TaskEnv, task_id: str) -> bool:
    """Whether a task with this id was ever started."""
    try:
        await env.client.get_workflow_handle(task_id).describe()
    except RPCError as err:
        assert err.status is RPCStatusCode.NOT_FOUND, err
        return False
    return True


async def call(client: ClientSession, tool: str, **arguments: Any) -> tuple[bool, Any]:
    """Whether the call failed, and its structured answer (or its error text)."""
    answer = await client.call_tool(tool, arguments)
    if answer.is_error:
        return True, " ".join(getattr(c, "text", "") for c in answer.content)
    return False, answer.structured_content


async def test_an_agent_tool_waits_for_its_approval_then_task_result_answers_the_result(
    env: TaskEnv, tmp_path: Path
) -> None:
    """The tool list names the agent and task_result; a call answers awaiting_approval with the
    request (submit_report, finance-lead); calling again with its task id answers the same task and
    starts nothing; once approved, task_result answers completed with the workflow's own output."""
    chosen = f"mcp-{uuid.uuid4().hex[:8]}"
    async with mcp_serve(env, tmp_path) as url, session(url, LEAD) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"monthly_report", "task_result"}
        prompt = "Prepare the sales report for 2026-10 and file it."
        failed, first = await call(client, "monthly_report", prompt=prompt, task_id=chosen, wait_seconds=120)
        assert not failed, first
        task_id = first["task_id"]
        assert task_id == f"acme/{chosen}"
        assert first["state"] == "awaiting_approval"
        [request] = first["pending"]
        assert (request["tool"], request["approvers"]) == ("submit_report", ["finance-lead"])
        assert "task_result" in first["resume"]

        handle = env.client.get_workflow_handle(task_id)
        run = (await handle.describe()).run_id
        failed, again = await call(client, "monthly_report", prompt=prompt, task_id=chosen, wait_seconds=5)
        assert not failed and again["task_id"] == task_id
        assert [p["request_id"] for p in again["pending"]] == [request["request_id"]]
        assert (await handle.describe()).run_id == run  # the same run: nothing started again

        await env.approve(handle)
        failed, done = await call(client, "task_result", task_id=task_id, wait_seconds=120)
        assert not failed, done
    result = await handle.result()
    assert done["state"] == "completed" == result["phase"]
    assert done["output"] == result["final_output"] and done["output"]
    status = await handle.query(STATUS_QUERY)
    assert status["prompt"].startswith(prompt[:40])


async def test_mcp_serve_refuses_callers_it_should_refuse_and_names_why(env: TaskEnv, tmp_path: Path) -> None:
    """No token: 401 before anything is read, and the official client cannot even initialize. A
    principal the tool's policy does not name gets the reason as the tool's error and no task starts;
    another tenant's task answers task_result exactly as a task that does not exist."""
    globex = {**example_spec(), "tenant": "globex"}
    other = await env.start(globex, task_id=f"globex/mcp-{uuid.uuid4().hex[:8]}")
    async with mcp_serve(env, tmp_path) as url:
        async with httpx.AsyncClient(timeout=30) as http:
            anonymous = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert anonymous.status_code == 401
        with pytest.raises(BaseExceptionGroup) as refused:  # the SDK's task groups wrap the 401
            async with session(url, None):
                pass
        assert refused.value.subgroup(MCPError) is not None

        chosen = f"mcp-{uuid.uuid4().hex[:8]}"
        async with session(url, ANALYST) as client:
            failed, error = await call(client, "monthly_report", prompt="file it", task_id=chosen)
        assert failed and "does not name 'analyst'" in error
        assert not await exists(env, f"acme/{chosen}")

        async with session(url, LEAD) as client:
            _, theirs = await call(client, "task_result", task_id=other.id, wait_seconds=0)
            _, missing = await call(client, "task_result", task_id="globex/none-such", wait_seconds=0)
    assert theirs.replace(other.id, "ID") == missing.replace("globex/none-such", "ID")
    await other.terminate("test over")


async def test_a_flood_of_waiting_calls_stops_at_the_cap_and_a_huge_body_is_not_read(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """With api_max_streams=2 and no worker (so every accepted call waits its whole time), twelve
    concurrent calls of one principal: two wait and answer "running", the other ten are refused
    naming the cap and start no task; a body over api_max_body_bytes (64 KB here) gets 413."""
    env = config_env
    async with mcp_serve(env, tmp_path, api_max_streams="2", api_max_body_bytes=str(64 * 1024)) as url:
        ids = [f"flood-{uuid.uuid4().hex[:6]}-{i}" for i in range(12)]

        async def one(chosen: str) -> tuple[bool, Any]:
            async with session(url, LEAD) as client:
                return await call(client, "monthly_report", prompt="report", task_id=chosen, wait_seconds=20)

        answers = await asyncio.gather(*(one(chosen) for chosen in ids))
        accepted = {ids[i] for i, (failed, _) in enumerate(answers) if not failed}
        refused = [answer for failed, answer in answers if failed]
        assert len(accepted) == 2 and len(refused) == 10
        assert all("2 calls waiting already" in answer for answer in refused)
        assert all(a["state"] == "running" for failed, a in answers if not failed)
        for chosen in ids:
            assert await exists(env, f"acme/{chosen}") == (chosen in accepted), chosen
        for chosen in accepted:
            await env.client.get_workflow_handle(f"acme/{chosen}").terminate("test over")

        huge = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "pad": "x" * 200_000})
        async with httpx2.AsyncClient(timeout=30) as http:
            answer = await http.post(
                url,
                content=huge,
                headers={"Authorization": f"Bearer {LEAD}", "Content-Type": "application/json"},
            )
        assert answer.status_code == 413


async def test_the_docs_client_block_calls_the_served_agent(env: TaskEnv, tmp_path: Path) -> None:
    """docs/mcp-serve.md's Python block, run as written in its own process against `mcp-serve`:
    it prints the task id, awaiting_approval and the request's tool, as the page says."""
    [block] = DOC_BLOCK.findall((REPO / "docs" / "mcp-serve.md").read_text())
    script = tmp_path / "client.py"
    script.write_text(block)
    async with mcp_serve(env, tmp_path) as url:
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(script)],
            env={**os.environ, "MCP_URL": url, "MCP_TOKEN": LEAD},
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    task_id, state, tools = done.stdout.strip().split(" ", 2)
    assert task_id.startswith("task-") and state == "awaiting_approval"
    assert tools == "['submit_report']"
    await env.client.get_workflow_handle(task_id).terminate("test over")
