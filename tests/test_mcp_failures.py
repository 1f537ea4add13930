"""MCP servers that fail on a real worker: a write-class tool slower than its timeout, a write's
server that is gone, and a read tool's server gone during a turn. Temporal retries the `mcp.call`
(or the `agent.turn`) and, when the attempts run out, the task hands off naming what failed; the
agent (`ticketeer-hasty`) gives its tools a 2 s timeout and 3 attempts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.client import Client

from tests.helpers.mcp_servers import TicketServer, start_tickets
from tests.helpers.mcp_tasks import (
    approve_next,
    attempts,
    mcp_env,
    next_request,
    reject_next,
    scheduled,
)
from tests.helpers.support import DevServer, assert_replays, running_worker

SPEC = {
    "agent": "ticketeer-hasty",
    "prompt": "The printer on floor 3 is out of toner: file a ticket and page on-call.",
    "policy": {"default_approvers": ["it-lead"]},
}


@pytest.fixture
def tickets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TicketServer]:
    # A ticket is committed at once and answered 4 s later; a page answers after 5 s: both past the
    # tools' 2 s timeout.
    server = start_tickets(tmp_path, TICKETS_SLOW_AFTER_COMMIT="4", TICKETS_PAGE_SECONDS="5")
    monkeypatch.setenv("AW_TICKETS_URL", server.url)
    yield server
    server.stop()


async def test_an_mcp_write_slower_than_its_timeout_is_retried_found_by_lookup_or_handed_off(
    client: Client, dev_server: DevServer, tmp_path: Path, tickets: TicketServer
) -> None:
    """The ticket's first attempt times out after committing; the retry's lookup finds it under the
    key and the tool is not called again. The page (no lookup) times out on each of its 3 attempts,
    each paging again, and the task hands off naming the tool and its operation key."""
    env = mcp_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(SPEC)
        await approve_next(env, handle, "create_ticket")
        await approve_next(env, handle, "page_oncall")
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF, result.reason
    [ticket] = result.evidence.tool_effects
    assert ticket.tool == "create_ticket" and ticket.replayed is True
    state = tickets.counts()
    assert state["effects"] == 1 and state["create_calls"] == 1
    assert state["pages"] == 3
    history = await assert_replays(client, handle.id)
    _, page = scheduled(history, "mcp.call")
    page_key = page["operation_key"]
    assert result.reason == (
        f"page_oncall (mcp tickets) under {page_key} did not settle after 3 attempt(s); its outcome "
        "is unknown: MCP server 'tickets' is unavailable (no answer from page_oncall within 2s): "
        "TimeoutError"
    )
    (ticket_attempt, ticket_timeout), (page_attempt, _) = attempts(history, "mcp.call")
    assert ticket_attempt == 2 and page_attempt == 3
    assert ticket_timeout is not None and "no answer from create_ticket within 2s" in ticket_timeout


async def test_an_approved_mcp_write_whose_server_is_gone_is_retried_then_hands_off_naming_it(
    client: Client, dev_server: DevServer, tmp_path: Path, tickets: TicketServer
) -> None:
    """The server stops while the ticket awaits approval: `mcp.call` fails to connect on each of
    its 3 attempts (Temporal's retries) and the task hands off naming the server; nothing was made."""
    env = mcp_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(SPEC)
        await next_request(handle, "create_ticket")
        tickets.stop()
        await approve_next(env, handle, "create_ticket")
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF, result.reason
    assert result.reason is not None
    assert result.reason.startswith("create_ticket (mcp tickets) under ")
    assert "MCP server 'tickets' is unavailable (connecting)" in result.reason
    assert result.evidence.tool_effects == []
    assert tickets.counts()["effects"] == 0
    history = await assert_replays(client, handle.id)
    [(attempt, last_failure)] = attempts(history, "mcp.call")
    assert attempt == 3
    assert last_failure is not None and "'tickets' is unavailable (connecting)" in last_failure


async def test_a_read_tools_server_gone_during_a_turn_retries_the_turn_then_hands_off_naming_it(
    client: Client, dev_server: DevServer, tmp_path: Path, tickets: TicketServer
) -> None:
    """The server stops while the ticket awaits approval, which is rejected: the next turn's search
    cannot reach the server, Temporal retries the turn, and when its attempts run out the task hands
    off naming the server rather than failing."""
    env = mcp_env(client, dev_server, tmp_path)
    async with running_worker(client, env.config):
        handle = await env.start(SPEC)
        await next_request(handle, "create_ticket")
        tickets.stop()
        await reject_next(handle, "create_ticket", "use the search first")
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    assert result.phase is TaskPhase.HANDED_OFF, result.reason
    assert result.reason is not None
    assert result.reason.startswith(
        "agent turn 2 did not finish: MCP server 'tickets' is unavailable (connecting)"
    )
    history = await assert_replays(client, handle.id)
    # The second turn had the catalog: what failed was the search, not a listing of the tools.
    assert scheduled(history, "agent.turn")[1]["mcp_catalog_ref"]
    first, second = attempts(history, "agent.turn")
    assert first == (1, None)
    assert second[0] == 5
    assert second[1] is not None and "'tickets' is unavailable (connecting)" in second[1]
