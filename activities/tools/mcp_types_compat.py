"""The MCP SDK's shapes, read through its public types only (our own bridge, not the Agents SDK's).

The Agents SDK keeps a private bridge over MCP SDK 1.x / 2.x shapes (its ``mcp`` package's ``_compat``); a
rename there would take down every role that imports the MCP tool modules. We require MCP SDK 2.x
(``mcp>=2,<3`` in pyproject.toml), so this module reads its public names: ``mcp.MCPError``, the error
codes of ``mcp_types``, the snake_case fields of ``mcp_types.Tool`` and ``mcp_types.CallToolResult``,
and the HTTP client errors the MCP transports raise (``httpx2`` for MCP 2.x, plus ``httpx`` where an
older transport is in use). ``tests/test_mcp_types_compat.py`` is its contract test: it builds the
MCP SDK's own objects and errors and checks every answer here.
"""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import mcp_types
from mcp import MCPError

__all__ = [
    "MCPError",
    "http_status_code",
    "is_http_connect_error",
    "is_http_status_error",
    "is_http_timeout_error",
    "is_http_transport_error",
    "is_mcp_connection_closed_error",
    "is_mcp_timeout_error",
    "mcp_error_message",
    "result_is_error",
    "result_structured_content",
    "tool_input_schema",
]

# Both HTTP clients' error types: MCP 2.x transports use httpx2; a server wrapper of the Agents SDK
# may still hand back httpx's.
_STATUS_ERRORS: tuple[type[Exception], ...] = (httpx2.HTTPStatusError, httpx.HTTPStatusError)
_REQUEST_ERRORS: tuple[type[Exception], ...] = (httpx2.RequestError, httpx.RequestError)
_CONNECT_ERRORS: tuple[type[Exception], ...] = (httpx2.ConnectError, httpx.ConnectError)
_TIMEOUT_ERRORS: tuple[type[Exception], ...] = (httpx2.TimeoutException, httpx.TimeoutException)


def tool_input_schema(tool: mcp_types.Tool) -> dict[str, Any]:
    """The JSON schema of ``tool``'s arguments (``{}`` when the server gave none)."""
    return dict(tool.input_schema or {})


def result_structured_content(result: mcp_types.CallToolResult) -> dict[str, Any] | None:
    """The structured content of a tool call's result, if the server sent any."""
    return result.structured_content


def result_is_error(result: mcp_types.CallToolResult) -> bool:
    """Whether the server marked a tool call's result as an error."""
    return bool(result.is_error)


def mcp_error_message(error: BaseException) -> str:
    """The message of an MCP protocol error (``str(error)`` for any other error)."""
    return error.message if isinstance(error, MCPError) else str(error)


def _mcp_code(error: BaseException) -> int | None:
    return error.code if isinstance(error, MCPError) else None


def is_mcp_timeout_error(error: BaseException) -> bool:
    """Whether ``error`` is the MCP client's request timeout."""
    return _mcp_code(error) == mcp_types.REQUEST_TIMEOUT


def is_mcp_connection_closed_error(error: BaseException) -> bool:
    """Whether ``error`` says the MCP connection closed under the request."""
    return _mcp_code(error) == mcp_types.CONNECTION_CLOSED


def is_http_status_error(error: BaseException) -> bool:
    """Whether ``error`` is an HTTP error status from the server."""
    return isinstance(error, _STATUS_ERRORS)


def http_status_code(error: BaseException) -> int:
    """The HTTP status of an ``is_http_status_error`` error."""
    return int(error.response.status_code)  # type: ignore[attr-defined]


def is_http_connect_error(error: BaseException) -> bool:
    """Whether ``error`` says the server could not be reached."""
    return isinstance(error, _CONNECT_ERRORS)


def is_http_timeout_error(error: BaseException) -> bool:
    """Whether ``error`` is an HTTP timeout (connect, read, write or pool)."""
    return isinstance(error, _TIMEOUT_ERRORS)


def is_http_transport_error(error: BaseException) -> bool:
    """Whether ``error`` is any HTTP failure: an error status or a failed request."""
    return isinstance(error, _STATUS_ERRORS + _REQUEST_ERRORS)
