"""MCP servers made durable, against real MCP servers: a ticket system over Streamable HTTP and a
notes server over stdio (contained by bubblewrap), both built with the official ``mcp`` SDK."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.agent.tools import effect_of, plan_call
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.errors import AgentError, McpUnavailable
from agent_worker.activities.tools.mcp import (
    McpRules,
    McpWrite,
    call_mcp_tool,
    durable_mcp_tools,
    unavailable_cause,
)
from agent_worker.activities.tools.mcp_contain import containment_problem
from agent_worker.schemas.actions import EffectClass, McpCall
from agent_worker.schemas.tools import McpCatalog, ToolCallInput
from agents import Agent, FunctionTool, RunConfig, Runner, function_tool
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp

from agent_worker.testing import Script
from tests.helpers.mcp_servers import SERVERS, TicketServer, start_tickets

TICKET_RULES = McpRules(
    server="tickets",
    read=["search"],
    write={"create_ticket": McpWrite(key_argument="request_id", lookup_tool="find_ticket")},
    timeout_seconds=10,
)


@pytest.fixture
def tickets(tmp_path: Path) -> Iterator[TicketServer]:
    server = start_tickets(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


def _http(url: str, **params: Any) -> MCPServerStreamableHttp:
    return MCPServerStreamableHttp({"url": url, **params}, name="tickets")


def _tool(agent: Agent[Any], name: str) -> FunctionTool:
    tool = next(t for t in agent.tools if t.name == name)
    assert isinstance(tool, FunctionTool)
    return tool


def _mcp_input(operation: McpCall, key: str = "task-1:call-1") -> ToolCallInput:
    return ToolCallInput(
        task_id="task-1", agent="helper", call_id="call-1", operation_key=key, operation=operation
    )


async def test_the_catalog_is_listed_once_and_a_later_turn_builds_the_tools_from_it_without_the_server(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(name="helper", mcp_servers=[_http(tickets.url)])
    async with durable_mcp_tools(agent, [TICKET_RULES], store, None) as (first, ref):
        first_names = sorted(t.name for t in first.tools)
    assert ref is not None
    catalog = McpCatalog.model_validate(store.get_json(ref))
    effects = {t.name: t.effect for t in catalog.servers[0].tools}
    assert effects == {
        "search": EffectClass.READ,
        "create_ticket": EffectClass.WRITE,
        "page_oncall": EffectClass.WRITE,  # no rule names these: writes, by default
        "fail_tool": EffectClass.WRITE,
    }  # find_ticket, the lookup, is not shown to the agent
    tickets.stop()
    async with durable_mcp_tools(agent, [TICKET_RULES], store, ref) as (again, same_ref):
        assert same_ref == ref
        assert sorted(t.name for t in again.tools) == first_names
        assert again.mcp_servers == []


async def test_an_agent_without_mcp_servers_comes_back_unchanged(store: LocalArtifactStore) -> None:
    agent = Agent(name="plain")
    async with durable_mcp_tools(agent, [], store, None) as (same, ref):
        assert same is agent and ref is None


async def test_a_read_tool_answers_inside_a_run_of_the_sdk_runner(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(
        name="helper",
        mcp_servers=[_http(tickets.url)],
        model=Script(("search", {"query": "printer"}), "done"),
    )
    async with durable_mcp_tools(agent, [TICKET_RULES], store, None) as (durable, _ref):
        result = await Runner.run(
            durable, "find printer tickets", run_config=RunConfig(tracing_disabled=True)
        )
    outputs = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
    assert outputs == ["found 0 for 'printer': []"]
    assert result.final_output == "done"


async def test_a_write_tool_stops_the_run_and_plans_an_mcp_call_without_the_key_in_the_models_schema(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(
        name="helper",
        mcp_servers=[_http(tickets.url)],
        model=Script(("create_ticket", {"title": "printer on fire"}), "filed"),
    )
    async with durable_mcp_tools(agent, [TICKET_RULES], store, None) as (durable, _ref):
        tool = _tool(durable, "create_ticket")
        assert "request_id" not in tool.params_json_schema["properties"]
        assert "request_id" not in tool.params_json_schema.get("required", [])
        result = await Runner.run(durable, "file it", run_config=RunConfig(tracing_disabled=True))
        assert [i.raw_item.name for i in result.interruptions] == ["create_ticket"]
        arguments = json.loads(result.interruptions[0].raw_item.arguments)
        declaration = effect_of(tool)
        assert declaration is not None and declaration.effect is EffectClass.WRITE
        operation = plan_call(tool, arguments)
    assert operation == McpCall(
        server="tickets",
        tool="create_ticket",
        arguments={"title": "printer on fire"},
        key_argument="request_id",
        lookup_tool="find_ticket",
        timeout_seconds=10,
        max_attempts=5,
    )
    assert tickets.counts()["effects"] == 0  # nothing ran: the workflow owns the call


async def test_planning_a_write_with_invalid_arguments_names_the_problem(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    from agent_worker.activities.errors import ToolPlanError

    agent = Agent(name="helper", mcp_servers=[_http(tickets.url)])
    async with durable_mcp_tools(agent, [TICKET_RULES], store, None) as (durable, _ref):
        with pytest.raises(ToolPlanError, match="title"):
            plan_call(_tool(durable, "create_ticket"), {"titel": "typo"})


async def test_a_retried_call_finds_the_committed_effect_by_lookup_and_the_server_counts_one(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(name="helper", mcp_servers=[_http(tickets.url)])
    operation = McpCall(
        server="tickets",
        tool="create_ticket",
        arguments={"title": "printer on fire"},
        key_argument="request_id",
        lookup_tool="find_ticket",
    )
    first = await call_mcp_tool(agent, [TICKET_RULES], _mcp_input(operation), 1, store)
    assert json.loads(first.output)["request_id"] == "task-1:call-1"  # the key went in the argument
    assert not first.replayed and not first.is_error
    # The first attempt committed but its answer was lost: Temporal runs attempt 2.
    again = await call_mcp_tool(agent, [TICKET_RULES], _mcp_input(operation), 2, store)
    assert again.replayed
    assert json.loads(again.output) == json.loads(first.output)
    assert store.get(again.output_digest).decode() == again.output
    assert tickets.counts()["effects"] == 1
    assert tickets.counts()["create_calls"] == 1  # the lookup answered: no second call


async def test_a_retry_whose_lookup_finds_nothing_calls_the_tool(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(name="helper", mcp_servers=[_http(tickets.url)])
    operation = McpCall(
        server="tickets",
        tool="create_ticket",
        arguments={"title": "lost before commit"},
        key_argument="request_id",
        lookup_tool="find_ticket",
    )
    result = await call_mcp_tool(agent, [TICKET_RULES], _mcp_input(operation), 2, store)
    assert not result.replayed
    assert tickets.counts()["effects"] == 1


async def test_a_tool_error_comes_back_as_an_error_result(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(name="helper", mcp_servers=[_http(tickets.url)])
    operation = McpCall(server="tickets", tool="fail_tool", arguments={"reason": "no paper"})
    result = await call_mcp_tool(agent, [TICKET_RULES], _mcp_input(operation), 1, store)
    assert result.is_error
    assert "refused: no paper" in result.output


async def test_a_stopped_server_raises_mcp_unavailable_naming_it(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(name="helper", mcp_servers=[_http(tickets.url)])
    tickets.stop()
    operation = McpCall(server="tickets", tool="search", arguments={"query": "x"})
    with pytest.raises(McpUnavailable, match="tickets") as caught:
        await call_mcp_tool(agent, [TICKET_RULES], _mcp_input(operation), 1, store)
    assert caught.value.retryable == "yes"


async def test_a_server_refusing_the_credentials_raises_mcp_unavailable(
    tmp_path: Path, store: LocalArtifactStore
) -> None:
    server = start_tickets(tmp_path, token="s3cret")
    try:
        wrong = Agent(
            name="helper", mcp_servers=[_http(server.url, headers={"Authorization": "Bearer nope"})]
        )
        operation = McpCall(server="tickets", tool="search", arguments={"query": "x"})
        # The MCP SDK (2.x) reports an HTTP error status without its code.
        with pytest.raises(McpUnavailable, match="'tickets' is unavailable \\(connecting\\)") as caught:
            await call_mcp_tool(wrong, [TICKET_RULES], _mcp_input(operation), 1, store)
        assert caught.value.retryable == "yes"
        assert "nope" not in str(caught.value)
        right = Agent(
            name="helper", mcp_servers=[_http(server.url, headers={"Authorization": "Bearer s3cret"})]
        )
        result = await call_mcp_tool(right, [TICKET_RULES], _mcp_input(operation), 1, store)
        assert result.output.startswith("found 0")
    finally:
        server.stop()


async def test_a_long_output_is_cut_and_kept_whole_in_the_store(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(name="helper", mcp_servers=[_http(tickets.url)])
    operation = McpCall(server="tickets", tool="search", arguments={"query": "x" * 20_000})
    result = await call_mcp_tool(agent, [TICKET_RULES], _mcp_input(operation), 1, store)
    assert len(result.output) < 17_000 and result.output_digest in result.output
    assert store.get(result.output_ref).decode() == result.output  # what the next turn's model reads
    assert len(store.get(result.output_digest)) > 20_000


async def test_rules_naming_a_tool_or_server_that_does_not_exist_are_a_clear_error(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(name="helper", mcp_servers=[_http(tickets.url)])
    with pytest.raises(AgentError, match="'delete_ticket', which the server does not offer"):
        async with durable_mcp_tools(
            agent, [McpRules(server="tickets", write=["delete_ticket"])], store, None
        ):
            pass
    with pytest.raises(AgentError, match="server 'jira', which agent 'helper' does not have"):
        async with durable_mcp_tools(agent, [McpRules(server="jira")], store, None):
            pass


async def test_hidden_tools_are_dropped_and_shared_names_get_the_server_prefix(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    @function_tool
    def search(query: str) -> str:
        """The agent's own search."""
        return query

    rules = [McpRules(server="tickets", read=["search"], unlisted="hide")]
    agent = Agent(name="helper", tools=[search], mcp_servers=[_http(tickets.url)])
    async with durable_mcp_tools(agent, rules, store, None) as (durable, _ref):
        assert sorted(t.name for t in durable.tools) == ["search", "tickets__search"]


# stdio, contained


def _stdio(**env: str) -> MCPServerStdio:
    # The working directory must be readable by the sandbox's nobody (pytest's tmp_path is not).
    params = {
        "command": sys.executable,
        "args": [str(SERVERS / "notes_stdio.py")],
        "env": env,
        "cwd": str(SERVERS),
    }
    return MCPServerStdio(params, name="notes", client_session_timeout_seconds=20)


NOTE_RULES = McpRules(server="notes", read=["read_file_tool", "net_probe", "whoami"], write=["write_note"])


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host directory anyone may write to, outside every tmp dir the server could have."""
    path = Path(tempfile.mkdtemp(prefix="mcp-host-", dir="/var/tmp"))
    path.chmod(0o777)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


needs_bwrap = pytest.mark.skipif(containment_problem() is not None, reason=f"{containment_problem()}")


async def _read(
    agent: Agent[Any], rules: list[McpRules], tool: str, arguments: dict[str, Any], store: Any
) -> str:
    operation = McpCall(server="notes", tool=tool, arguments=arguments)
    result = await call_mcp_tool(agent, rules, _mcp_input(operation), 1, store)
    return result.output


@needs_bwrap
async def test_a_stdio_server_runs_contained_without_network_or_host_writes(
    tmp_path: Path, store: LocalArtifactStore, listener: int, host_dir: Path
) -> None:
    agent = Agent(name="helper", mcp_servers=[_stdio(PROBE_PORT=str(listener), NOTES_DIR=str(host_dir))])
    assert (await _read(agent, [NOTE_RULES], "net_probe", {}, store)).startswith("unreachable")
    wrote = await _read(agent, [NOTE_RULES], "write_note", {"text": "hi", "key": "k1"}, store)
    assert "Read-only file system" in wrote
    assert list(host_dir.iterdir()) == []
    who = await _read(agent, [NOTE_RULES], "whoami", {}, store)
    assert "uid=65534" in who
    names = set(json.loads(who.split("env=", 1)[1].replace("'", '"')))
    assert names <= {"PATH", "HOME", "PROBE_PORT", "NOTES_DIR", "PWD", "LC_CTYPE"}
    # Its working directory is readable (bound in, read-only, wherever the checkout lies).
    assert "out of toner" in await _read(
        agent, [NOTE_RULES], "read_file_tool", {"path": str(SERVERS / "printer.txt")}, store
    )


@needs_bwrap
async def test_a_stdio_server_in_a_directory_closed_to_other_users_still_runs_contained(
    tmp_path: Path, store: LocalArtifactStore
) -> None:
    """The server's script and working directory lie under pytest's private temporary directory (as
    a checkout under /root would): only they are bound back in, and the server runs as nobody; the
    rest of the closed directory stays out of its sight."""
    assert not tmp_path.parent.stat().st_mode & 0o001  # others cannot enter it
    (tmp_path / "secret.txt").write_text("not for the server")
    srv = tmp_path / "srv"
    srv.mkdir(mode=0o755)
    shutil.copy(SERVERS / "notes_stdio.py", srv / "notes_stdio.py")
    os.chmod(srv, 0o755)
    os.chmod(srv / "notes_stdio.py", 0o644)
    params = {"command": sys.executable, "args": [str(srv / "notes_stdio.py")], "cwd": str(srv)}
    agent = Agent(name="helper", mcp_servers=[MCPServerStdio(params, name="notes")])
    assert "uid=65534" in await _read(agent, [NOTE_RULES], "whoami", {}, store)
    hidden = await _read(agent, [NOTE_RULES], "read_file_tool", {"path": str(tmp_path / "secret.txt")}, store)
    assert "not for the server" not in hidden


@needs_bwrap
async def test_a_stdio_server_gets_the_network_when_its_rule_allows_it(
    tmp_path: Path, store: LocalArtifactStore, listener: int
) -> None:
    agent = Agent(name="helper", mcp_servers=[_stdio(PROBE_PORT=str(listener))])
    rules = [McpRules(server="notes", read=["net_probe"], network=True)]
    assert await _read(agent, rules, "net_probe", {}, store) == "reached"


@needs_bwrap
async def test_a_stdio_server_writes_to_its_private_tmp_and_answers_read_tools_in_a_run(
    tmp_path: Path, store: LocalArtifactStore
) -> None:
    agent = Agent(
        name="helper",
        mcp_servers=[_stdio()],
        model=Script(("whoami", {}), "done"),
    )
    assert (
        await _read(agent, [NOTE_RULES], "write_note", {"text": "hi", "key": "k"}, store)
    ) == "wrote /tmp/k.txt"
    async with durable_mcp_tools(agent, [NOTE_RULES], store, None) as (durable, _ref):
        result = await Runner.run(durable, "who are you", run_config=RunConfig(tracing_disabled=True))
    outputs = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
    assert outputs[0].startswith("uid=65534")


async def test_a_stdio_server_that_cannot_start_raises_mcp_unavailable(
    tmp_path: Path, store: LocalArtifactStore
) -> None:
    server = MCPServerStdio({"command": str(tmp_path / "no-such-server")}, name="notes")
    agent = Agent(name="helper", mcp_servers=[server])
    with pytest.raises(McpUnavailable, match="'notes'"):
        await _read(agent, [NOTE_RULES], "whoami", {}, store)


def test_the_containment_probe_passes_on_this_machine() -> None:
    """The machine the suite runs on must run contained stdio servers (the skips above are for
    other machines): bubblewrap is installed here."""
    assert containment_problem() is None or os.environ.get("AW_TEST_NO_BWRAP")


async def test_a_read_tool_whose_server_is_gone_fails_the_turn_with_mcp_unavailable(
    tickets: TicketServer, store: LocalArtifactStore
) -> None:
    agent = Agent(
        name="helper",
        mcp_servers=[_http(tickets.url)],
        model=Script(("search", {"query": "printer"}), "done"),
    )
    async with durable_mcp_tools(agent, [TICKET_RULES], store, None) as (_durable, ref):
        pass
    tickets.stop()
    async with durable_mcp_tools(agent, [TICKET_RULES], store, ref) as (durable, _ref):
        with pytest.raises(Exception) as caught:  # the SDK wraps it in a UserError
            await Runner.run(durable, "find printer tickets", run_config=RunConfig(tracing_disabled=True))
    unavailable = unavailable_cause(caught.value)
    assert unavailable is not None and "'tickets' is unavailable" in str(unavailable)
    assert unavailable.retryable == "yes"


_WITHOUT_BWRAP = """
import sys
from agents.mcp import MCPServerStdio
from agent_worker.activities.errors import McpUnavailable
from agent_worker.activities.tools.mcp_contain import contained_server
server = MCPServerStdio({"command": sys.executable, "args": ["server.py"]}, name="notes")
try:
    contained_server(server, network=False, timeout_seconds=5, unsafe_dev=False)
except McpUnavailable as err:
    print("REFUSED", err.retryable, err)
plain = contained_server(server, network=False, timeout_seconds=5, unsafe_dev=True)
print("UNSAFE", plain.params.command == sys.executable)
"""


def test_a_stdio_server_is_refused_where_bubblewrap_cannot_run_unless_unsafe_dev_is_set() -> None:
    env = {**os.environ, "PATH": "/nonexistent"}  # no bwrap on the PATH
    root = Path(__file__).parent.parent
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_BWRAP], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    refused = next(line for line in lines if line.startswith("REFUSED"))
    unsafe = next(line for line in lines if line.startswith("UNSAFE "))
    assert "UNSAFE: stdio MCP server runs uncontained" in done.stdout + done.stderr  # the warning
    assert refused.startswith(
        "REFUSED no stdio MCP server 'notes' cannot run contained: bubblewrap is not installed"
    )
    assert "AGENT_WORKER_SANDBOX_UNSAFE_DEV=1" in refused
    assert unsafe == "UNSAFE True"
