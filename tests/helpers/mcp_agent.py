"""An agent that brings two MCP servers: a ticket system over Streamable HTTP (its URL in
``AW_TICKETS_URL``) and a notes server over stdio (run contained by the worker). Its scripted model
searches the tickets and reads a file (read tools, inside the run), then opens a ticket and writes a
note (write tools: approval, then ``mcp.call`` under the operation key)."""

from __future__ import annotations

import os
import sys

from agents.mcp import MCPServerStdio, MCPServerStreamableHttp

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
