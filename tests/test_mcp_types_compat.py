"""Contract test of our bridge over the MCP SDK's public shapes (activities/tools/mcp_types_compat.py):
each answer checked against the MCP SDK's own objects and errors, so an MCP upgrade that renames one
fails here rather than in a task."""

from __future__ import annotations

import httpx2
import mcp_types
from agent_worker.activities.tools import mcp_types_compat as compat
from mcp import MCPError


def test_a_tools_argument_schema_is_read_from_the_mcp_sdks_tool():
    """The argument schema comes from ``mcp_types.Tool`` as the server sent it."""
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert compat.tool_input_schema(mcp_types.Tool(name="t", input_schema=schema)) == schema


def test_a_call_results_error_flag_and_structured_content_are_read():
    """``CallToolResult``'s error flag and structured content are read as the server set them."""
    text = mcp_types.TextContent(type="text", text="no")
    failed = mcp_types.CallToolResult(content=[text], is_error=True, structured_content={"a": 1})
    assert compat.result_is_error(failed) is True
    assert compat.result_structured_content(failed) == {"a": 1}
    fine = mcp_types.CallToolResult(content=[text])
    assert compat.result_is_error(fine) is False
    assert compat.result_structured_content(fine) is None


def test_mcp_protocol_errors_are_told_apart_by_their_code():
    """A request timeout and a closed connection are recognised by the MCP SDK's own codes, with the
    message read from the error."""
    timeout = MCPError(mcp_types.REQUEST_TIMEOUT, "timed out")
    closed = MCPError(mcp_types.CONNECTION_CLOSED, "closed")
    assert compat.is_mcp_timeout_error(timeout) and not compat.is_mcp_connection_closed_error(timeout)
    assert compat.is_mcp_connection_closed_error(closed) and not compat.is_mcp_timeout_error(closed)
    assert compat.mcp_error_message(timeout) == "timed out"
    assert compat.mcp_error_message(ValueError("x")) == "x"


def test_http_failures_of_the_mcp_transport_are_classified():
    """The HTTP client the MCP SDK's transports use raises errors classified as status, connect,
    timeout and transport failures, with the status read from the response."""
    request = httpx2.Request("POST", "http://mcp.invalid/")
    status = httpx2.HTTPStatusError("no", request=request, response=httpx2.Response(503, request=request))
    assert compat.is_http_status_error(status) and compat.http_status_code(status) == 503
    connect = httpx2.ConnectError("refused", request=request)
    assert compat.is_http_connect_error(connect) and compat.is_http_transport_error(connect)
    timeout = httpx2.ReadTimeout("slow", request=request)
    assert compat.is_http_timeout_error(timeout) and compat.is_http_transport_error(timeout)
    assert not compat.is_http_transport_error(OSError("disk"))
