"""MCP servers an agent brings, made durable.

An agent keeps its MCP servers (``Agent(mcp_servers=[...])``: Streamable HTTP, SSE or stdio, as the
OpenAI Agents SDK defines them). The worker never lets the SDK list or call them on its own:

- **One tool list per task.** The first turn lists every server's tools and stores them as an
  ``McpCatalog`` in the artifact store; the task keeps its digest and every later turn, retry and
  replay builds the same tools from it.
- **Classified by the registration's ``McpRules``.** A ``read`` tool runs inside the turn (with a
  timeout, recorded like any read tool). A ``write`` tool (the default for a tool no rule names) or
  a ``sandbox`` tool stops the turn: policy and approval apply, and the workflow runs it as its own
  ``mcp.call`` activity. A write tool can take the operation key in a declared argument
  (``key_argument``) and name a ``lookup_tool`` that finds a call's effect by that key, so a retry
  after a lost answer reconciles instead of calling twice. A lookup tool no ``read`` rule names is
  not shown to the agent; ``unlisted="hide"`` hides every tool no rule names. A rule naming a tool
  the server does not offer, or a server the agent does not have, is an error at the first turn.
- **Names.** The agent sees each tool under its own name, or ``<server>__<tool>`` where two servers
  (or a server and a function tool) share the name. The key argument is not in the schema the
  model sees; the arguments are checked against the rest of the server's input schema when the
  call is planned.
- **Errors.** A tool's own error (an MCP error result) reaches the model as the tool's output. An
  unreachable server, refused credentials or no answer within ``timeout_seconds`` raise
  ``McpUnavailable`` (retryable): Temporal retries the activity (the ``mcp.call``, or the turn for
  a listing or a read tool), then the task hands off naming the server.
- **Bounded outputs.** A tool's result (its text, its content items one a line, an image or other
  item as JSON, or its structured content) over 16,000 characters reaches the model as its head
  and a note naming the whole's size and digest; the whole is in the artifact store
  (``activities.tools.results``). So for a read tool inside the turn as for a write's ``mcp.call``.
- **stdio servers run contained**: under bubblewrap with the sandbox rules (read-only root, no
  network unless the rules allow it, a private writable directory). Where bubblewrap cannot run,
  the server is refused unless ``sandbox_unsafe_dev`` says otherwise (``mcp_contain``).

Every context (one turn, one ``mcp.call``) opens its own connection to a server on first use and
closes it at exit; the agent's own server objects are never connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
import structlog
from agent_worker.activities.agent.tools import (
    EFFECT_ATTR,
    EffectDeclaration,
    return_workflow_result,
    running_turn,
)
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import AgentError, McpUnavailable, ToolPlanError
from agent_worker.activities.tools.mcp_contain import Connections, contained_server, server_unavailable
from agent_worker.activities.tools.mcp_types_compat import tool_input_schema
from agent_worker.activities.tools.results import bounded_read, tool_result
from agent_worker.schemas.actions import EffectClass, McpCall
from agent_worker.schemas.tools import McpCatalog, McpServerTools, McpTool, ToolCallInput, ToolCallResult
from agents import Agent, FunctionTool
from agents.mcp import MCPServer, MCPServerSse, MCPServerStdio, MCPServerStreamableHttp
from agents.tool_context import ToolContext

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class McpWrite:
    """How a write-class MCP tool is made exactly-once.

    Attributes:
        key_argument: The tool's argument that receives the operation key (hidden from the model).
        lookup_tool: A tool of the same server that takes ``{key_argument: key}`` and answers the
            earlier call's result, or an empty / ``null`` result when nothing was done under the key.
    """

    key_argument: str | None = None
    lookup_tool: str | None = None


@dataclass(frozen=True)
class McpRules:
    """How the tools of one of an agent's MCP servers (by the server's ``name``) are treated.

    Attributes:
        server: The MCP server's name (``MCPServer.name``).
        read: Tools that only read: they run inside the turn.
        write: Tools with effects, each with its key argument and lookup tool (a plain list: no key).
        sandbox: Tools that run code or commands: policy treats them as sandbox actions.
        unlisted: What a tool no rule names is: ``write`` (needs the policy's approval) or ``hide``
            (the agent does not see it).
        timeout_seconds: How long connecting, and each call (a read, a write, its lookup), may
            take; past it the call fails as the server's unavailability (retried, then hand-off).
        max_attempts: Attempts of one ``mcp.call`` (Temporal's retries) before the task hands off.
        network: Whether a stdio server may use the network (bubblewrap shares the host's).
    """

    server: str
    read: Sequence[str] = ()
    write: Mapping[str, McpWrite] | Sequence[str] = field(default_factory=dict)
    sandbox: Sequence[str] = ()
    unlisted: Literal["write", "hide"] = "write"
    timeout_seconds: float = 60.0
    max_attempts: int = 5
    network: bool = False


# A lookup answering one of these found nothing under the key.
_NOTHING_FOUND = {"", "null", "none", "{}", "[]"}
_TRANSPORTS: tuple[tuple[type[MCPServer], Literal["streamable_http", "sse", "stdio"]], ...] = (
    (MCPServerStdio, "stdio"),
    (MCPServerStreamableHttp, "streamable_http"),
    (MCPServerSse, "sse"),
)


def _config_error(message: str) -> AgentError:
    return AgentError(message, operation="mcp.tools", retryable="no")


def _transport(server: MCPServer) -> Literal["streamable_http", "sse", "stdio"]:
    for cls, transport in _TRANSPORTS:
        if isinstance(server, cls):
            return transport
    raise _config_error(
        f"MCP server {server.name!r} is a {type(server).__name__}; the worker runs MCPServerStdio, "
        "MCPServerStreamableHttp and MCPServerSse servers"
    )


def _rules_by_server(agent: Agent[Any], rules: Sequence[McpRules]) -> dict[str, McpRules]:
    """Each of the agent's servers with its rules (defaults where none is given)."""
    names = [server.name for server in agent.mcp_servers]
    if len(set(names)) != len(names):
        raise _config_error(f"agent {agent.name!r} has two MCP servers with one name: {names}")
    given: dict[str, McpRules] = {}
    for rule in rules:
        if rule.server not in names:
            raise _config_error(
                f"MCP rules name server {rule.server!r}, which agent {agent.name!r} does not have "
                f"(its MCP servers: {names})"
            )
        if rule.server in given:
            raise _config_error(f"two McpRules for MCP server {rule.server!r}")
        given[rule.server] = rule
    return {name: given.get(name, McpRules(server=name)) for name in names}


def _writes(rule: McpRules) -> dict[str, McpWrite]:
    for kind in ("read", "write", "sandbox"):
        if isinstance(getattr(rule, kind), str):
            raise _config_error(
                f"McpRules({rule.server!r}).{kind} must be a list of tool names, not a string"
            )
    if isinstance(rule.write, Mapping):
        return dict(rule.write)
    return {name: McpWrite() for name in rule.write}


def _classify(server: str, transport: Any, offered: Sequence[Any], rule: McpRules) -> McpServerTools:
    """The server's tools as the rules class them (raising on a rule that does not fit the server)."""
    schemas = {tool.name: tool_input_schema(tool) or {} for tool in offered}
    writes = _writes(rule)
    lookups = {w.lookup_tool for w in writes.values() if w.lookup_tool}
    seen: dict[str, str] = {}
    for kind, names in (
        ("read", rule.read),
        ("write", writes),
        ("sandbox", rule.sandbox),
        ("lookup", lookups),
    ):
        for name in names:
            if name not in schemas:
                raise _config_error(
                    f"MCP rules for server {server!r} name {kind} tool {name!r}, which the server does "
                    f"not offer (it offers: {sorted(schemas)})"
                )
            if kind != "lookup" and seen.setdefault(name, kind) != kind:
                raise _config_error(f"MCP server {server!r}: tool {name!r} is both {seen[name]} and {kind}")
    for name, write in writes.items():
        if write.lookup_tool and not write.key_argument:
            raise _config_error(f"MCP server {server!r}: tool {name!r} has a lookup tool but no key_argument")
        properties = schemas[name].get("properties") or {}
        if write.key_argument and write.key_argument not in properties:
            raise _config_error(
                f"MCP server {server!r}: tool {name!r} has no argument {write.key_argument!r} for the "
                f"operation key (its arguments: {sorted(properties)})"
            )
    tools = []
    for tool in offered:
        write = writes.get(tool.name, McpWrite())
        if tool.name in rule.read:
            effect = EffectClass.READ
        elif tool.name in writes:
            effect = EffectClass.WRITE
        elif tool.name in rule.sandbox:
            effect = EffectClass.SANDBOX
        elif tool.name in lookups or rule.unlisted == "hide":
            continue  # a lookup tool not listed as read is for reconciliation only
        else:
            effect = EffectClass.WRITE
        tools.append(
            McpTool(
                name=tool.name,
                exposed_as=tool.name,
                description=tool.description or "",
                input_schema=schemas[tool.name],
                effect=effect,
                key_argument=write.key_argument,
                lookup_tool=write.lookup_tool,
                timeout_seconds=rule.timeout_seconds,
                max_attempts=rule.max_attempts,
            )
        )
    return McpServerTools(server=server, transport=transport, tools=tools)


def _expose(catalog: McpCatalog, function_tools: Sequence[str]) -> None:
    """Name each tool as the agent sees it: its own name, or ``<server>__<tool>`` where it is shared."""
    count = Counter([*function_tools, *(t.name for s in catalog.servers for t in s.tools)])
    for server in catalog.servers:
        prefix = re.sub(r"[^A-Za-z0-9_-]", "_", server.server)
        for tool in server.tools:
            tool.exposed_as = tool.name if count[tool.name] == 1 else f"{prefix}__{tool.name}"
    exposed = Counter(t.exposed_as for s in catalog.servers for t in s.tools)
    clash = sorted(name for name in exposed if exposed[name] > 1 or name in function_tools)
    if clash:
        raise _config_error(f"MCP tools still share names after prefixing with their server: {clash}")


def _fresh(server: MCPServer, rule: McpRules, unsafe_dev: bool) -> MCPServer:
    """A new, unconnected copy of ``server`` (one per context: the agent's own is never connected)."""
    timeout = rule.timeout_seconds
    if isinstance(server, MCPServerStdio):
        return contained_server(server, network=rule.network, timeout_seconds=timeout, unsafe_dev=unsafe_dev)
    if isinstance(server, MCPServerStreamableHttp | MCPServerSse):
        static_filter = server.tool_filter if isinstance(server.tool_filter, dict) else None
        return type(server)(
            server.params,  # type: ignore[arg-type]
            name=server.name,
            client_session_timeout_seconds=timeout,
            tool_filter=static_filter,  # type: ignore[arg-type]
            use_structured_content=server.use_structured_content,
        )
    _transport(server)  # raises, naming the unsupported type
    raise AssertionError("unreachable")


def _connections(
    servers: Mapping[str, MCPServer], rules: Mapping[str, McpRules], unsafe_dev: bool
) -> Connections:
    def fresh(name: str) -> tuple[MCPServer, float]:
        return _fresh(servers[name], rules[name], unsafe_dev), rules[name].timeout_seconds

    return Connections(fresh)


def _model_schema(tool: McpTool) -> dict[str, Any]:
    """The tool's input schema as the model sees it: without the key argument."""
    schema = copy.deepcopy(tool.input_schema) or {}
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    if tool.key_argument:
        schema["properties"].pop(tool.key_argument, None)
        if "required" in schema:
            schema["required"] = [name for name in schema["required"] if name != tool.key_argument]
    return schema


def _planner(server: str, tool: McpTool) -> Callable[[dict[str, Any]], McpCall]:
    schema = _model_schema(tool)
    validator = jsonschema.validators.validator_for(schema)(schema)

    def plan(arguments: dict[str, Any]) -> McpCall:
        # The key is the workflow's to give, never the model's.
        arguments = {k: v for k, v in arguments.items() if k != tool.key_argument}
        problems = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if problems:
            text = "; ".join(
                f"{'/'.join(map(str, e.absolute_path)) or 'arguments'}: {e.message}" for e in problems
            )
            raise ToolPlanError(f"invalid arguments for {tool.exposed_as}: {text}", operation="agent.plan")
        return McpCall(
            server=server,
            tool=tool.name,
            arguments=arguments,
            key_argument=tool.key_argument,
            lookup_tool=tool.lookup_tool,
            timeout_seconds=tool.timeout_seconds,
            max_attempts=tool.max_attempts,
        )

    return plan


def _durable_tool(server: str, tool: McpTool, connections: Connections, store: ArtifactStore) -> FunctionTool:
    if tool.effect is not EffectClass.READ:
        effect_tool = FunctionTool(
            name=tool.exposed_as,
            description=tool.description,
            params_json_schema=_model_schema(tool),
            on_invoke_tool=return_workflow_result,
            strict_json_schema=False,
            needs_approval=True,
        )
        setattr(
            effect_tool, EFFECT_ATTR, EffectDeclaration(tool.effect, _planner(server, tool), None, McpCall)
        )
        return effect_tool

    async def read(ctx: ToolContext[Any], raw_arguments: str) -> str:
        try:
            arguments = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as err:
            return f"error: the arguments are not JSON: {err}"
        if not isinstance(arguments, dict):
            return "error: the arguments must be a JSON object"
        text, _is_error = await connections.call(server, tool.name, arguments, tool.timeout_seconds)
        # The model reads the head; the whole is kept (a read tool's answer can be any size).
        turn = running_turn()
        return await bounded_read(store, text, ctx.tool_call_id, turn.whole_outputs if turn else None)

    return FunctionTool(
        name=tool.exposed_as,
        description=tool.description,
        params_json_schema=_model_schema(tool),
        on_invoke_tool=read,
        strict_json_schema=False,
    )  # what ``read`` raises (McpUnavailable) fails the turn: Temporal retries it, then hand-off


@contextlib.asynccontextmanager
async def durable_mcp_tools(
    agent: Agent[Any],
    rules: Sequence[McpRules],
    store: ArtifactStore,
    catalog_ref: str | None,
    *,
    unsafe_dev: bool = False,
) -> AsyncIterator[tuple[Agent[Any], str | None]]:
    """The agent with its MCP servers replaced by durable tools, and the task's catalog reference.

    Without ``catalog_ref`` the servers are listed (once) and the catalog stored; with it, the
    catalog is loaded and no server is listed again. Read tools call their server from inside the
    turn (connected on first use, closed when the context exits); write and sandbox tools stop the
    run for the workflow, which runs them with ``call_mcp_tool``.

    Raises:
        AgentError: (not retryable) the rules do not fit the agent or its servers.
        McpUnavailable: a server could not be listed (retryable), or a stdio server cannot run
            contained (not retryable).
    """
    if not agent.mcp_servers:
        yield agent, None
        return
    by_server = _rules_by_server(agent, rules)
    servers = {server.name: server for server in agent.mcp_servers}
    connections = _connections(servers, by_server, unsafe_dev)
    try:
        if catalog_ref is None:
            catalog = McpCatalog()
            for name, server in servers.items():
                transport = _transport(server)
                connected = await connections.get(name)
                try:
                    offered = await asyncio.wait_for(connected.list_tools(), by_server[name].timeout_seconds)
                except (Exception, BaseExceptionGroup) as err:
                    raise server_unavailable(name, "listing tools", err) from None
                catalog.servers.append(_classify(name, transport, offered, by_server[name]))
            _expose(catalog, [tool.name for tool in agent.tools])
            catalog_ref = await asyncio.to_thread(store.put_json, catalog.model_dump(mode="json"))
        else:
            catalog = McpCatalog.model_validate(await asyncio.to_thread(store.get_json, catalog_ref))
            unknown = sorted({s.server for s in catalog.servers} - set(servers))
            if unknown:
                raise _config_error(
                    f"the task's MCP catalog names servers agent {agent.name!r} lacks: {unknown}"
                )
        tools = [
            _durable_tool(s.server, tool, connections, store) for s in catalog.servers for tool in s.tools
        ]
        yield agent.clone(mcp_servers=[], tools=[*agent.tools, *tools]), catalog_ref
    finally:
        await connections.aclose()


def unavailable_cause(err: BaseException) -> McpUnavailable | None:
    """The ``McpUnavailable`` a read tool raised, from what ``Runner.run`` raised: the SDK wraps a
    tool's exception in ``UserError("Error running tool ...")`` with the original as its cause."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, McpUnavailable):
            return seen
        seen = seen.__cause__
    return None


async def call_mcp_tool(
    agent: Agent[Any],
    rules: Sequence[McpRules],
    input: ToolCallInput,
    attempt: int,
    store: ArtifactStore,
    *,
    unsafe_dev: bool = False,
) -> ToolCallResult:
    """Run one approved ``McpCall`` (the body of the ``mcp.call`` activity).

    On a retry (``attempt > 1``) with a lookup tool, the lookup is asked first: an effect already
    made under the operation key is returned (``replayed``) instead of calling again. A tool's
    error result comes back with ``is_error``.

    Raises:
        McpUnavailable: the server cannot be reached, refuses the credentials or does not answer
            in time (retryable); a stdio server cannot run contained (not retryable).
        AgentError: (not retryable) the operation names a server the agent does not have.
    """
    operation = input.operation
    if not isinstance(operation, McpCall):
        raise _config_error(f"mcp.call got a {operation.kind} operation")
    servers = {server.name: server for server in agent.mcp_servers}
    if operation.server not in servers:
        raise _config_error(
            f"agent {agent.name!r} has no MCP server {operation.server!r} "
            f"(its MCP servers: {sorted(servers)})"
        )
    connections = _connections(servers, _rules_by_server(agent, rules), unsafe_dev)
    try:
        key = operation.key_argument
        if attempt > 1 and operation.lookup_tool and key:
            found, is_error = await connections.call(
                operation.server, operation.lookup_tool, {key: input.operation_key}, operation.timeout_seconds
            )
            if not is_error and found.strip().lower() not in _NOTHING_FOUND:
                return await asyncio.to_thread(tool_result, store, found, replayed=True)
        arguments = {**operation.arguments, **({key: input.operation_key} if key else {})}
        text, is_error = await connections.call(
            operation.server, operation.tool, arguments, operation.timeout_seconds
        )
        return await asyncio.to_thread(tool_result, store, text, is_error=is_error)
    finally:
        await connections.aclose()
