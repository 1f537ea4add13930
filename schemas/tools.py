"""Effect tools the agent brings: own async functions (``effect_tool``) and MCP servers' tools.

A call of such a tool stops the agent turn like every effect; after policy and approval the workflow
runs it as its own activity (``tool.call`` for a function, ``mcp.call`` for an MCP tool) under an
operation key derived from the task and the call, and records a ``ToolEffectRecord`` as evidence.
An MCP server's tool list is fetched once per task (``McpCatalog``, kept in the artifact store by
reference), so every turn, retry and replay of the task sees the same tools.
"""

from __future__ import annotations

from typing import Any, Literal

from agent_worker.schemas.actions import EffectClass, FunctionCall, McpCall
from agent_worker.schemas.digests import DIGEST_PATTERN
from pydantic import BaseModel, Field


class ToolCallInput(BaseModel):
    """Input of ``tool.call`` and ``mcp.call``."""

    task_id: str
    agent: str
    call_id: str
    operation_key: str = Field(min_length=8)
    operation: FunctionCall | McpCall = Field(discriminator="kind")
    mcp_catalog_ref: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    owner: str = Field(default="", description="The SDK agent that proposed the call: its tool is preferred.")


class ToolCallResult(BaseModel):
    """Output of ``tool.call`` and ``mcp.call``: what the model sees as the tool's output."""

    output: str = Field(description="The output, or its head and a note naming the whole when it is long.")
    output_ref: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="Digest of `output` in the artifact store when it is a head (the next turn reads it).",
    )
    output_digest: str = Field(pattern=DIGEST_PATTERN, description="Digest of the whole output.")
    is_error: bool = Field(
        default=False,
        description="The tool refused or failed for good without an effect (``ToolError``, an MCP "
        "tool error): the model sees the error.",
    )
    replayed: bool = Field(
        default=False, description="A retry found the effect already made (by lookup): nothing ran again."
    )


class ToolEffectRecord(BaseModel):
    """One effect tool call as evidence."""

    call_id: str
    tool: str = Field(description="The tool's name as the agent sees it.")
    source: Literal["function", "mcp"]
    target: str = Field(default="", description="The business system (function) or server (MCP), by name.")
    operation_key: str
    arguments_digest: str = Field(pattern=DIGEST_PATTERN)
    output_digest: str = Field(pattern=DIGEST_PATTERN)
    is_error: bool = False
    replayed: bool = False


class McpTool(BaseModel):
    """One tool of an MCP server, as the task's catalog keeps it."""

    name: str = Field(description="The tool's name on its server.")
    exposed_as: str = Field(description="The name the agent sees (unique across the agent's tools).")
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    effect: EffectClass = EffectClass.WRITE
    key_argument: str | None = None
    lookup_tool: str | None = None
    timeout_seconds: float = 60.0
    max_attempts: int = 5


class McpServerTools(BaseModel):
    """The tools one MCP server offered when the task first listed them."""

    server: str
    transport: Literal["streamable_http", "sse", "stdio"]
    tools: list[McpTool] = Field(default_factory=list)


class McpCatalog(BaseModel):
    """An agent's MCP tools for one task, fetched once (stored as JSON; the task keeps its digest)."""

    servers: list[McpServerTools] = Field(default_factory=list)
