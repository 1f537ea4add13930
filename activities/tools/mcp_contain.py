"""Reaching an agent's MCP servers: one connection per server per context, transport failures
told apart from tool errors, and stdio servers contained.

``Connections`` opens each server on first use and closes all at exit. What says the server is
down, gone, slow or refusing the credentials (a refused connection, an HTTP error status, a stdio
process that fails to start or dies, no answer in time) becomes ``McpUnavailable`` (retryable);
a tool's own error result, or an MCP protocol error about the call, is the tool's output.

A stdio server is a program the worker starts itself, so it gets the sandbox rules:

- the host's root **read-only** (``--ro-bind / /``: the server's own command, libraries and
  interpreter stay visible; nothing on the host can be changed), with the Docker socket hidden;
- a private, size-capped writable ``/tmp`` (also its ``HOME``), gone when the server exits;
- fresh IPC, PID, UTS and cgroup namespaces, and **no network** (a private, empty network
  namespace) unless the server's ``McpRules.network`` is set;
- the ``nobody`` user with no capabilities and ``no_new_privs``; a worker running as root runs
  bubblewrap privileged and drops to the real ``nobody`` (as the process sandbox tier does), so
  root-only files stay unreadable;
- ``--die-with-parent`` and ``--new-session``;
- an environment of what the server's params give, plus ``PATH`` (and ``HOME=/tmp``).

The server's ``cwd`` (the worker's when the params give none) is its working directory inside,
read-only. It, the command's install and the files its arguments name stay reachable where they lie
under the host's ``/tmp`` or under a directory closed to other users (a checkout under ``/root``):
such a directory is replaced by an empty one with only those paths bound back in, read-only. They
must themselves be readable by ``nobody``. Where
bubblewrap cannot run, the server is refused unless the worker runs with ``sandbox_unsafe_dev``
(then it runs as a plain subprocess, with a warning).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
from agent_worker.activities.errors import McpUnavailable
from agent_worker.activities.sandbox.process import DOCKER_SOCKETS
from agent_worker.activities.tools.mcp_types_compat import (  # the MCP SDK's public shapes (our own bridge)
    MCPError,
    http_status_code,
    is_http_connect_error,
    is_http_status_error,
    is_http_timeout_error,
    is_http_transport_error,
    is_mcp_connection_closed_error,
    is_mcp_timeout_error,
    mcp_error_message,
    result_is_error,
    result_structured_content,
)
from agents.exceptions import UserError
from agents.mcp import MCPServer, MCPServerStdio

log = structlog.get_logger(__name__)

_NOBODY = "65534"
_TMP_BYTES = 64 * 1024 * 1024
# What the MCP client passes to every stdio server besides the params' own env (its
# DEFAULT_INHERITED_ENV_VARS on POSIX); inside, only PATH stays (and HOME, pointed at /tmp).
_CLIENT_DEFAULT_ENV = ("LOGNAME", "SHELL", "TERM", "USER")
UNSAFE_DEV_HINT = "set AGENT_WORKER_SANDBOX_UNSAFE_DEV=1 for trusted development only"


def contained_argv(
    command: str, args: Sequence[str], cwd: str, env: Mapping[str, str], *, network: bool
) -> list[str]:
    """The argv that runs ``command args`` under bubblewrap with the rules above."""
    argv = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--size", str(_TMP_BYTES), "--perms", "1777", "--tmpfs", "/tmp"]
    for socket in sorted({os.path.realpath(s) for s in DOCKER_SOCKETS if os.path.exists(s)}):
        argv += ["--ro-bind", "/dev/null", socket]
    argv += _reachable(_needed_paths(command, args, cwd))
    argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--new-session", "--chdir", cwd]
    if "HOME" not in env:
        argv += ["--setenv", "HOME", "/tmp"]
    for name in _CLIENT_DEFAULT_ENV:
        if name not in env:
            argv += ["--unsetenv", name]
    if os.geteuid() == 0:
        # In a user namespace nobody would map to root; privileged bubblewrap, then the real nobody.
        drop = ["setpriv", f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups"]
        drop += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        return [*argv, "--", *drop, command, *args]
    argv += ["--unshare-user", "--uid", _NOBODY, "--gid", _NOBODY, "--cap-drop", "ALL"]
    return [*argv, "--", command, *args]


def _needed_paths(command: str, args: Sequence[str], cwd: str) -> list[str]:
    """What the server must reach besides what the read-only root shows: its working directory, its
    command's install (``<prefix>/bin/cmd``: the prefix, for a virtualenv's interpreter both the
    virtualenv and the interpreter it links to) and the directories of the files its arguments name."""
    paths = {os.path.abspath(cwd)}
    found = shutil.which(command) or command
    if os.path.isabs(found):
        for exe in {os.path.abspath(found), os.path.realpath(found)}:
            paths.add(os.path.dirname(os.path.dirname(exe)))
    for arg in args:
        if os.path.isabs(arg) and os.path.exists(arg):
            paths.add(arg if os.path.isdir(arg) else os.path.dirname(arg))
    return sorted(paths)


def _closed_ancestor(path: str) -> str | None:
    """The highest directory above ``path`` that other users cannot enter (``/root``, a private
    temporary directory), or None."""
    for parent in reversed(Path(path).parents):
        if parent != Path("/") and not parent.stat().st_mode & stat.S_IXOTH:
            return str(parent)
    return None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _reachable(paths: Sequence[str]) -> list[str]:
    """bubblewrap arguments that let ``nobody`` reach ``paths`` read-only: those under the private
    ``/tmp`` are bound back in; where a directory above one is closed to other users (a checkout or
    an interpreter under ``/root``), that directory becomes an empty tmpfs (hiding the rest of it)
    with the paths bound back in. Paths the read-only root already shows are left alone."""
    closed = sorted({top for p in paths if (top := _closed_ancestor(p)) and not _under(top, "/tmp")})
    argv = []
    for top in closed:
        argv += ["--perms", "0755", "--tmpfs", top]
    made: set[str] = set()
    for path in paths:
        top = next((t for t in ["/tmp", *closed] if _under(path, t)), None)
        if top is None:
            continue
        # The directories between are made open (bubblewrap would copy the host's closed modes).
        for parent in reversed(Path(path).parents):
            if _under(str(parent), top) and str(parent) != top and str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", path, path]
    return argv


@functools.cache
def containment_problem() -> str | None:
    """Why stdio servers cannot run contained here, or None when bubblewrap works (checked once)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "setpriv is not installed (util-linux)"
    argv = contained_argv("true", [], "/", {}, network=False)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, text=True, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return f"bubblewrap could not run: {err}"
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip()[-300:]
        return f"bubblewrap could not create the sandbox: {reason or f'exit {done.returncode}'}"
    return None


def contained_server(
    server: MCPServerStdio, *, network: bool, timeout_seconds: float, unsafe_dev: bool
) -> MCPServerStdio:
    """A new, unconnected ``MCPServerStdio`` (same name) whose process runs under bubblewrap.

    Raises:
        McpUnavailable: (not retryable) bubblewrap cannot run here and ``unsafe_dev`` is off.
    """
    params = server.params
    env = dict(params.env or {})
    common = {
        "env": env,
        "encoding": params.encoding,
        "encoding_error_handler": params.encoding_error_handler,
    }
    problem = containment_problem()
    if problem is not None:
        if not unsafe_dev:
            raise McpUnavailable(
                f"stdio MCP server {server.name!r} cannot run contained: {problem}; {UNSAFE_DEV_HINT}",
                operation="mcp.connect",
                retryable="no",
            )
        log.warning(
            "UNSAFE: stdio MCP server runs uncontained (sandbox_unsafe_dev): it has the worker's "
            "files and network; development on trusted servers only",
            server=server.name,
            problem=problem,
        )
        plain = {"command": params.command, "args": list(params.args), "cwd": params.cwd, **common}
        return MCPServerStdio(plain, name=server.name, client_session_timeout_seconds=timeout_seconds)
    cwd = str(params.cwd or os.getcwd())
    argv = contained_argv(params.command, params.args, cwd, env, network=network)
    wrapped = {"command": argv[0], "args": argv[1:], "cwd": cwd, **common}
    return MCPServerStdio(wrapped, name=server.name, client_session_timeout_seconds=timeout_seconds)


# How the SDK words a transport failure (``UserError``): the server is down or refuses us.
_TRANSPORT_WORDS = (
    "Failed to connect",
    "HTTP error",
    "Connection lost",
    "Connection timeout",
    "Request failed",
)
_HTTP_STATUS_STAND_IN = "Server returned an error response"


def _describe(err: BaseException) -> str:
    """What went wrong, from the innermost errors, without URLs or headers (they may hold secrets)."""
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_describe(e) for e in err.exceptions))
    if is_http_status_error(err):
        return f"HTTP error {http_status_code(err)}"
    if is_http_connect_error(err):
        return "could not reach the server"
    if is_http_timeout_error(err):
        return "connection timeout"
    if is_http_transport_error(err):
        return f"HTTP request failed ({type(err).__name__})"
    if isinstance(err, MCPError):
        return mcp_error_message(err)
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def server_unavailable(server: str, doing: str, err: BaseException) -> McpUnavailable:
    """The retryable error saying ``server`` failed while ``doing`` something, and how."""
    cause = _describe(err)
    return McpUnavailable(f"MCP server {server!r} is unavailable ({doing}): {cause}", operation="mcp.call")


def _transport_failure(err: BaseException) -> bool:
    """Whether ``err`` says the server is down, gone or refusing us (as opposed to a tool error)."""
    if isinstance(err, BaseExceptionGroup):
        return any(_transport_failure(e) for e in err.exceptions)
    if isinstance(err, MCPError):
        # The MCP client's stand-in for an HTTP error status (401, 403, 5xx) it does not name.
        http_status = mcp_error_message(err) == _HTTP_STATUS_STAND_IN
        return http_status or is_mcp_connection_closed_error(err) or is_mcp_timeout_error(err)
    if isinstance(err, UserError):
        return any(words in str(err) for words in _TRANSPORT_WORDS)
    return isinstance(err, OSError | TimeoutError | EOFError) or is_http_transport_error(err)


def _text(result: Any) -> str:
    parts = [
        item.text if item.type == "text" else item.model_dump_json(exclude_none=True)
        for item in result.content
    ]
    structured = result_structured_content(result)
    if not parts and structured is not None:
        parts.append(json.dumps(structured))
    return "\n".join(parts)


class Connections:
    """The servers of one context, connected on first use (at most once each) and all closed at exit.

    ``fresh(name)`` gives a new, unconnected server (contained, for stdio) and how long connecting
    may take: the agent's own server objects are never connected, so concurrent activities and
    turns of one worker never share a session.
    """

    def __init__(self, fresh: Callable[[str], tuple[MCPServer, float]]) -> None:
        self._fresh = fresh
        self._open: dict[str, MCPServer] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, name: str) -> MCPServer:
        """The connected server called ``name``.

        Raises:
            McpUnavailable: it could not be started or reached, or refused the credentials.
        """
        async with self._locks.setdefault(name, asyncio.Lock()):
            if name not in self._open:
                server, seconds = self._fresh(name)
                try:
                    await asyncio.wait_for(server.connect(), seconds)
                except (Exception, BaseExceptionGroup) as err:
                    with contextlib.suppress(Exception):
                        await server.cleanup()
                    raise server_unavailable(name, "connecting", err) from None
                self._open[name] = server
            return self._open[name]

    async def call(self, name: str, tool: str, arguments: dict[str, Any], seconds: float) -> tuple[str, bool]:
        """The text of the tool's result and whether it is an error result.

        Raises:
            McpUnavailable: the server cannot be reached or did not answer within ``seconds``.
        """
        server = await self.get(name)
        try:
            result = await asyncio.wait_for(server.call_tool(tool, arguments), seconds)
        except (Exception, BaseExceptionGroup) as err:
            if isinstance(err, TimeoutError):
                raise server_unavailable(name, f"no answer from {tool} within {seconds:g}s", err) from None
            if _transport_failure(err):
                raise server_unavailable(name, f"calling {tool}", err) from None
            if isinstance(err, MCPError):
                return mcp_error_message(err), True
            if isinstance(err, UserError):
                return str(err), True
            raise
        return _text(result), bool(result_is_error(result))

    async def aclose(self) -> None:
        """Close every server opened (errors are logged, never raised)."""
        for name, server in self._open.items():
            try:
                await server.cleanup()
            except Exception as err:  # closing must not mask the context's own outcome
                log.warning("MCP server did not close cleanly", server=name, error=str(err))
        self._open.clear()
