"""MCP servers on a real worker, end to end: an agent with a ticket system over Streamable HTTP and a
notes server over stdio (contained), and one with the ticket system over SSE. Its read tools answer
inside the run; its write tools wait for approval and then run once, as `mcp.call` activities, with
the operation key in their key argument; a worker SIGKILLed while the ticket is being written leaves
one ticket (the retry's lookup finds it); the task's history replays."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.client import Client

from tests.helpers.mcp_servers import TicketServer, start_tickets
from tests.helpers.mcp_tasks import approve_next, mcp_env, scheduled
from tests.helpers.support import DevServer, assert_replays, running_worker, spawn_worker

SPEC = {
    "agent": "ticketeer",
    "prompt": "The printer on floor 3 is out of toner: file a ticket.",
    "policy": {"default_approvers": ["it-lead"]},
}


@pytest.fixture
def tickets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TicketServer]:
    server = start_tickets(tmp_path, TICKETS_SLOW_AFTER_COMMIT="6")
    monkeypatch.setenv("AW_TICKETS_URL", server.url)
    yield server
    server.stop()


async def test_a_task_uses_an_http_and_a_stdio_mcp_server_reads_inside_the_run_and_writes_once_approved(
    client: Client, dev_server: DevServer, tmp_path: Path, tickets: TicketServer
) -> None:
    """Reads answer inside the first turn (recorded as read tool calls); each write waits for its
    approval, without the key among the arguments the approver sees, then runs as its own `mcp.call`
    with the operation key; the tool list is listed once and every later turn uses that catalog."""
    env = mcp_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(SPEC)
        ticket_args = await approve_next(env, handle, "create_ticket")
        note_args = await approve_next(env, handle, "write_note")
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "Filed the ticket and the note."
    assert ticket_args == {"title": "Printer on floor 3 needs toner"}
    assert note_args == {"text": "ticket filed"}

    store = env.store()
    reads = {r.name: store.get(r.output_digest).decode() for r in result.evidence.tool_calls}
    assert "found 0 for 'printer'" in reads["search"]
    assert "out of toner" in reads["read_file_tool"]

    ticket, note = result.evidence.tool_effects
    assert (ticket.tool, ticket.source, ticket.target) == ("create_ticket", "mcp", "tickets")
    assert (note.tool, note.target) == ("write_note", "notes")
    state = tickets.counts()
    assert state["effects"] == 1 and state["create_calls"] == 1
    [made] = state["tickets"].values()
    assert made["request_id"] == ticket.operation_key and not ticket.replayed
    assert store.get(note.output_digest).decode() == f"wrote /tmp/{note.operation_key}.txt"

    history = await assert_replays(client, handle.id)
    calls = scheduled(history, "mcp.call")
    assert [c["operation"]["tool"] for c in calls] == ["create_ticket", "write_note"]
    turns = scheduled(history, "agent.turn")
    assert len(turns) == 3 and turns[0].get("mcp_catalog_ref") is None
    assert turns[1]["mcp_catalog_ref"] and turns[1]["mcp_catalog_ref"] == turns[2]["mcp_catalog_ref"]


async def test_sigkill_while_the_mcp_write_is_in_flight_leaves_one_ticket(
    client: Client, dev_server: DevServer, tmp_path: Path, tickets: TicketServer
) -> None:
    """The ticket server commits and answers 6 s later; the worker is SIGKILLed in between. The next
    worker's retry calls the lookup tool first, finds the ticket under the key, and does not call
    `create_ticket` again."""
    env = mcp_env(client, dev_server, tmp_path)
    first = spawn_worker(env, tmp_path / "worker-1.log", AW_TICKETS_URL=tickets.url)
    second = None
    try:
        handle = await env.start(SPEC)
        await approve_next(env, handle, "create_ticket")
        deadline = time.monotonic() + 60
        while tickets.counts()["effects"] < 1:
            assert time.monotonic() < deadline, "the ticket was never written"
            await asyncio.sleep(0.1)
        os.killpg(first.pid, signal.SIGKILL)
        assert await asyncio.to_thread(first.wait, 30) == -signal.SIGKILL
        second = spawn_worker(env, tmp_path / "worker-2.log", AW_TICKETS_URL=tickets.url)
        await approve_next(env, handle, "write_note")
        result: TaskResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.to_thread(proc.wait, 30)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    ticket, _ = result.evidence.tool_effects
    assert ticket.replayed is True
    state = tickets.counts()
    assert state["effects"] == 1 and state["create_calls"] == 1
    await assert_replays(client, handle.id)


async def test_a_task_uses_an_mcp_server_over_sse_reading_inside_the_run_and_writing_once_approved(
    client: Client, dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ticket system over SSE (FastMCP's sse transport) takes the same path as over Streamable
    HTTP: the search answers inside the first turn, the ticket waits for approval and is made once,
    by `mcp.call`, under the operation key."""
    server = start_tickets(tmp_path, sse=True)
    monkeypatch.setenv("AW_TICKETS_URL", server.url)
    env = mcp_env(client, dev_server, tmp_path)
    try:
        async with running_worker(client, env.config):
            handle = await env.start({**SPEC, "agent": "ticketeer-sse"})
            ticket_args = await approve_next(env, handle, "create_ticket")
            result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        state = server.counts()
    finally:
        server.stop()
    assert server.url.endswith("/sse")
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "Filed the ticket."
    assert ticket_args == {"title": "Printer on floor 3 needs toner"}
    [search] = result.evidence.tool_calls
    assert env.store().get(search.output_digest).decode() == "found 0 for 'printer': []"
    [ticket] = result.evidence.tool_effects
    assert (ticket.tool, ticket.target, ticket.is_error, ticket.replayed) == (
        "create_ticket",
        "tickets",
        False,
        False,
    )
    assert state["effects"] == 1 and state["create_calls"] == 1
    [made] = state["tickets"].values()
    assert made["request_id"] == ticket.operation_key
    history = await assert_replays(client, handle.id)
    [call] = scheduled(history, "mcp.call")
    assert call["operation"]["server"] == "tickets"
