"""The ``tool.call`` and ``mcp.call`` activities: one call of an effect tool the agent brought.

Both find the tool through the agent's registration (the function or the MCP server lives in the
agent's module), run it under the operation key the workflow derived, and keep the whole output in
the artifact store (the workflow gets a bounded preview and the digest).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import structlog
from agent_worker.activities.agent.registry import AgentRegistry, find_tool
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import ToolError, ToolPlanError, activity_boundary
from agent_worker.activities.tools import mcp as mcp_tools
from agent_worker.activities.tools.functions import FunctionDeclaration, call_arguments, function_of
from agent_worker.activities.tools.results import tool_result
from agent_worker.schemas.actions import FunctionCall, McpCall
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.digests import canonical_json
from agent_worker.schemas.tools import ToolCallInput, ToolCallResult
from temporalio import activity

log = structlog.get_logger(__name__)


class ToolActivities:
    """Effect tools of the registered agents: own functions and MCP servers' tools."""

    def __init__(self, registry: AgentRegistry, store: ArtifactStore, config: WorkerConfig) -> None:
        self.registry = registry
        self.store = store
        self.config = config

    @activity.defn(name="tool.call")
    @activity_boundary
    async def call_function(self, input: ToolCallInput) -> ToolCallResult:
        """Run an own function declared with ``effect_tool``, exactly once under the operation key."""
        operation = input.operation
        assert isinstance(operation, FunctionCall)
        declaration = self._function(input.agent, operation.tool, input.owner)
        key = input.operation_key
        await self._keep_arguments(operation)
        if declaration.lookup is not None and _attempt() > 1:
            found = await _call(declaration.lookup, [key], {})
            if found is not None:
                log.info("retried tool call was already made", tool=operation.tool, operation_key=key)
                return await self._result(_text(found), replayed=True)
        args, kwargs = call_arguments(declaration, operation.tool, operation.arguments, key)
        try:
            value = await _call(declaration.function, args, kwargs)
        except ToolError as err:
            return await self._result(f"error: {err}", is_error=True)
        log.info("tool call done", tool=operation.tool, system=operation.system, operation_key=key)
        return await self._result(_text(value))

    @activity.defn(name="mcp.call")
    @activity_boundary
    async def call_mcp(self, input: ToolCallInput) -> ToolCallResult:
        """Call a write-class or sandbox-class MCP tool, exactly once under the operation key."""
        assert isinstance(input.operation, McpCall)
        registration = self.registry.get(input.agent)
        await self._keep_arguments(input.operation)
        return await mcp_tools.call_mcp_tool(
            registration.build(),
            registration.mcp,
            input,
            _attempt(),
            self.store,
            unsafe_dev=self.config.sandbox_unsafe_dev,
        )

    async def _keep_arguments(self, operation: FunctionCall | McpCall) -> None:
        """Store the call's arguments as evidence (the workflow records their digest)."""
        await asyncio.to_thread(self.store.put, canonical_json(operation.arguments))

    def _function(self, agent: str, tool: str, owner: str = "") -> FunctionDeclaration:
        # Any agent of the registration's graph: a specialist reached by handoff brings its own tools.
        declaration = function_of(find_tool(self.registry.get(agent).build(), tool, owner=owner or None))
        if declaration is None:
            raise ToolPlanError(
                f"tool {tool!r} of agent {agent!r} is not an effect_tool", operation="tool.call"
            )
        return declaration

    async def _result(self, text: str, *, is_error: bool = False, replayed: bool = False) -> ToolCallResult:
        return await asyncio.to_thread(tool_result, self.store, text, is_error=is_error, replayed=replayed)


def _attempt() -> int:
    return activity.info().attempt if activity.in_activity() else 1


async def _call(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Await an async function; run a plain one in a thread (it may block)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    value = await asyncio.to_thread(fn, *args, **kwargs)
    return await value if inspect.isawaitable(value) else value


def _text(value: Any) -> str:
    """A function's return value as the model reads it: text as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump_json"):
        return str(value.model_dump_json())
    return json.dumps(value, sort_keys=True, default=str)
