"""Agents that bring MCP servers (the ticket system's URL in ``AW_TICKETS_URL``).

``ticketeer`` has two: the ticket system over Streamable HTTP and a notes server over stdio (run
contained by the worker). Its scripted model searches the tickets and reads a file (read tools,
inside the run), then opens a ticket and writes a note (write tools: approval, then ``mcp.call``
under the operation key). ``ticketeer-sse`` reaches the ticket system over SSE; ``ticketeer-hasty``
over Streamable HTTP with a 2 s timeout and 3 attempts, for the failure tests."""

from __future__ import annotations

import os
import sys

from agents.mcp import MCPServerSse, MCPServerStdio, MCPServerStreamableHttp

from agent_worker import Agent, AgentRegistration, McpRules, McpWrite
from agent_worker.testing import Script
from tests.helpers.mcp_servers import SERVERS

PRINTER_NOTE = SERVERS / "printer.txt"


def _build() -> Agent:
    tickets = MCPServerStreamableHttp(
        {"url": os.environ["AW_TICKETS_URL"]}, name="tickets", client_session_timeout_seconds=30
    )
    notes = MCPServerStdio(
        {"command": sys.executable, "args": [str(SERVERS / "notes_stdio.py")], "cwd": str(SERVERS)},
        name="notes",
        client_session_timeout_seconds=30,
    )
    return Agent(name="ticketeer", instructions="File tickets.", mcp_servers=[tickets, notes])


registrations = [
    AgentRegistration(
        name="ticketeer",
        build=_build,
        scripted_model=lambda: Script(
            ("search", {"query": "printer"}),
            ("read_file_tool", {"path": str(PRINTER_NOTE)}),
            ("create_ticket", {"title": "Printer on floor 3 needs toner"}),
            ("write_note", {"text": "ticket filed"}),
            "Filed the ticket and the note.",
        ),
        mcp=[
            McpRules(
                server="tickets",
                read=["search"],
                write={"create_ticket": McpWrite(key_argument="request_id", lookup_tool="find_ticket")},
                timeout_seconds=30,
            ),
            McpRules(
                server="notes",
                read=["read_file_tool"],
                write={"write_note": McpWrite(key_argument="key")},
                unlisted="hide",
                timeout_seconds=30,
            ),
        ],
    )
]


# The ticket system alone, for the transport and failure tests (tests/test_mcp_failures.py).
def _tickets_agent(name: str, server: type[MCPServerSse] | type[MCPServerStreamableHttp]) -> Agent:
    tickets = server({"url": os.environ["AW_TICKETS_URL"]}, name="tickets")
    return Agent(name=name, instructions="File tickets.", mcp_servers=[tickets])


TICKET_WRITE = McpWrite(key_argument="request_id", lookup_tool="find_ticket")

registrations += [
    # Over SSE: a search inside the run, then a ticket once approved.
    AgentRegistration(
        name="ticketeer-sse",
        build=lambda: _tickets_agent("ticketeer-sse", MCPServerSse),
        scripted_model=lambda: Script(
            ("search", {"query": "printer"}),
            ("create_ticket", {"title": "Printer on floor 3 needs toner"}),
            "Filed the ticket.",
        ),
        mcp=[McpRules(server="tickets", read=["search"], write={"create_ticket": TICKET_WRITE})],
    ),
    # Short timeout and few attempts: a ticket, a search, then a page (a write with no lookup).
    AgentRegistration(
        name="ticketeer-hasty",
        build=lambda: _tickets_agent("ticketeer-hasty", MCPServerStreamableHttp),
        scripted_model=lambda: Script(
            ("create_ticket", {"title": "Printer on floor 3 needs toner"}),
            ("search", {"query": "printer"}),
            ("page_oncall", {"message": "printer ticket filed"}),
            "Filed the ticket and paged.",
        ),
        mcp=[
            McpRules(
                server="tickets",
                read=["search"],
                write={"create_ticket": TICKET_WRITE, "page_oncall": McpWrite(key_argument="key")},
                unlisted="hide",
                timeout_seconds=2,
                max_attempts=3,
            )
        ],
    ),
]
