"""Agents as MCP tools (``agent-worker mcp-serve``): an MCP server over Streamable HTTP, at
``/v1/mcp``, whose tools are chosen agents. Another agent (any MCP client) calls one as a tool; the
call runs as a durable task like any other (its budgets, policy, approvals and evidence).

Each agent tool is a TaskSpec template (its agent, tenant, policy, budgets, inputs) whose prompt is
the caller's. A call starts the task and waits up to ``wait_seconds`` for it:

- closed in that time: the answer is its result (``state`` completed, rejected, handed_off, failed,
  cancelled; ``output``, ``reason``);
- waiting for a person: ``state`` ``awaiting_approval`` and the requests (tool, arguments, approvers,
  version), decided through the HTTP API, the inbox or the CLI as for any task;
- still working: ``state`` ``running``.

Either of the last two carries ``resume``: call ``task_result`` with the task id to wait again. A call
that names its ``task_id`` starts nothing when that task exists, so a caller that lost an answer
calls again and gets the same task: a retry never runs the agent twice.

The server sits behind the HTTP API's door (``api.guard``): the same tokens or proxy header, Host
check and body cap; a caller calls an agent only when the template's policy names them (as
``POST /v1/tasks`` requires) and within their tenants, and reads only the tasks the API would show
them (else the same answer as for a task that does not exist). Each principal has at most
``max_streams`` calls waiting at once (the API's cap of open streams); a further call is refused
with the reason. It runs stateless (each request a session of its own, JSON answers), so any number
of ``mcp-serve`` processes serve the same tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from agent_worker.api.app import ApiConfig, guard_settings, scoped_task_id
from agent_worker.api.guard import PRINCIPAL, Guard
from agent_worker.api.stream_tokens import StreamTokens
from agent_worker.inbox.service import InboxError, InboxService, may_view
from agent_worker.schemas.tasks import TaskId, TaskPhase, TaskResult, TaskSpec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from agent_worker.client import AgentWorkerClient, AgentWorkerError, TaskEnded, TaskNotFound

if TYPE_CHECKING:
    from starlette.types import ASGIApp
    from temporalio.client import Client

# Where the MCP endpoint is served (under /v1/, so the guard authenticates every request).
MCP_PATH = "/v1/mcp"
# How long a call waits for its task by default, and at most.
DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 300.0
# How often a waiting call looks for a pending request.
POLL_SECONDS = 0.5
# A tool's name: what MCP clients accept.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PROMPT_LIMIT = 64_000


# The tools' arguments, as the calling model reads them in the tools' input schemas.
Prompt = Annotated[str, Field(min_length=1, max_length=PROMPT_LIMIT, description="What to ask the agent.")]
ChosenId = Annotated[
    TaskId | None, Field(description="Name the task: calling again with it starts nothing new.")
]
StartedId = Annotated[str, Field(min_length=1, max_length=300, description="The task_id a call answered.")]
Wait = Annotated[
    float, Field(ge=0, le=MAX_WAIT_SECONDS, description="How long to wait for the task, in seconds.")
]


class McpToolError(ValueError):
    """An agent tool that cannot be served (a bad name, a duplicate)."""


@dataclass(frozen=True)
class AgentTool:
    """One agent as a tool.

    Attributes:
        name: The MCP tool's name (letters, digits, ``_``, ``-``).
        spec: The task each call starts, with the caller's prompt.
        description: What the calling model reads; by default it names the agent.
    """

    name: str
    spec: TaskSpec
    description: str = ""

    def __post_init__(self) -> None:
        if not TOOL_NAME.match(self.name):
            raise McpToolError(
                f"tool name {self.name!r}: use 1-64 letters, digits, '_' or '-' (what MCP clients accept)"
            )


class PendingRequest(BaseModel):
    """A request the task waits on, as a caller needs it to have it decided."""

    request_id: str
    version: str
    tool: str
    arguments: dict[str, Any]
    approvers: list[str]
    reason: str = ""


class TaskAnswer(BaseModel):
    """What an agent tool (or ``task_result``) answers."""

    task_id: str
    state: str = Field(description="The task's phase: completed, awaiting_approval, running, failed, ...")
    output: str | None = Field(default=None, description="The agent's final answer, once completed.")
    reason: str | None = Field(default=None, description="Why it ended otherwise, or what it waits for.")
    pending: list[PendingRequest] = Field(default_factory=list)
    resume: str | None = Field(default=None, description="How to wait for it again, while it runs.")


class Refused(Exception):
    """A call the caller may not make: its message is the tool's error."""


class _Waits:
    """Calls waiting per principal, capped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: Counter[str] = Counter()

    @contextlib.contextmanager
    def held(self, who: str) -> Iterator[None]:
        """One more call of ``who`` waiting while the block runs.

        Raises:
            Refused: ``who`` has ``cap`` calls waiting already.
        """
        if self.open[who] >= self.cap:
            raise Refused(f"{who!r} has {self.cap} calls waiting already; wait for one to answer")
        self.open[who] += 1
        try:
            yield
        finally:
            self.open[who] -= 1
            if not self.open[who]:
                del self.open[who]


class AgentTools:
    """The tools' behaviour, apart from the MCP server that calls it.

    Args:
        client: A connected Temporal client.
        config: The HTTP API's settings (who, tenants, task queue, keys, the cap of waiting calls).
        tools: The agents served.
    """

    def __init__(self, client: Client, config: ApiConfig, tools: list[AgentTool]) -> None:
        names = [t.name for t in tools]
        if not tools or len(set(names)) != len(names) or "task_result" in names:
            raise McpToolError(f"tool names must be one or more, distinct, and not 'task_result': {names}")
        self.config = config
        self.tasks = AgentWorkerClient(client, config.task_queue)
        self.service = InboxService(client, config.keys_dir)
        self.tools = {t.name: t for t in tools}
        self.waits = _Waits(config.max_streams)

    def _tenant_allowed(self, who: str, tenant: str) -> bool:
        return self.config.tenants is None or tenant in self.config.tenants.get(who, [])

    async def call(
        self, tool: str, who: str, prompt: str, task_id: str | None, wait_seconds: float
    ) -> TaskAnswer:
        """Start ``tool``'s task for ``who`` (or find the one ``task_id`` names) and wait for it.

        Raises:
            Refused: ``who`` may not run it (the template's policy does not name them, or its
                tenant is not theirs), or has too many calls waiting.
        """
        template = self.tools[tool].spec
        if not may_view(template.policy, who):
            raise Refused(f"the policy of {tool!r} does not name {who!r}: you could not see or decide it")
        if not self._tenant_allowed(who, template.tenant):
            raise Refused(f"{who!r} may not start tasks for tenant {template.tenant!r}")
        spec = template.model_copy(update={"prompt": prompt})
        chosen = scoped_task_id(spec.tenant, task_id) if task_id else None
        with self.waits.held(who):  # before the start: a refused call starts nothing
            ref = await self.tasks.start(spec, chosen)
            return await self._wait(ref.task_id, wait_seconds)

    async def result(self, who: str, task_id: str, wait_seconds: float) -> TaskAnswer:
        """Wait again for a task a call started (one ``who`` may see)."""
        try:
            await self.service.task(task_id, who)
        except InboxError as err:
            raise Refused(str(err)) from None
        spec = await self.service.spec(self.tasks.handle(task_id))
        if spec is None or not self._tenant_allowed(who, spec.tenant):
            raise Refused(f"no task {task_id!r} among the tasks {who!r} may see")
        with self.waits.held(who):
            return await self._wait(task_id, wait_seconds)

    async def _wait(self, task_id: str, wait_seconds: float) -> TaskAnswer:
        closing = asyncio.ensure_future(self.tasks.result(task_id))
        try:
            return await self._outcome(task_id, closing, time.monotonic() + wait_seconds)
        finally:
            closing.cancel()

    async def _outcome(
        self, task_id: str, closing: asyncio.Future[TaskResult], deadline: float
    ) -> TaskAnswer:
        resume = f"call task_result with task_id={task_id!r} to wait for it again"
        while True:
            done, _ = await asyncio.wait({closing}, timeout=POLL_SECONDS)
            if done:
                return _closed(task_id, closing)
            try:
                status = await self.tasks.status(task_id, wait_seconds=POLL_SECONDS * 4)
            except AgentWorkerError:
                status = None  # its worker is busy or restarting: keep waiting on the result
            if status is not None and status.pending:
                pending = [
                    PendingRequest(
                        request_id=r.request_id,
                        version=r.version,
                        tool=r.action.tool,
                        arguments=r.action.arguments,
                        approvers=r.approvers,
                        reason=r.reason,
                    )
                    for r in status.pending
                    if not r.decided
                ]
                if pending:
                    return TaskAnswer(
                        task_id=task_id,
                        state=TaskPhase.AWAITING_APPROVAL.value,
                        reason="waiting for a decision: have one of the approvers decide it "
                        "(HTTP API, inbox or `agent-worker approve`)",
                        pending=pending,
                        resume=resume,
                    )
            if time.monotonic() >= deadline:
                phase = status.phase.value if status is not None else TaskPhase.RUNNING.value
                return TaskAnswer(task_id=task_id, state=phase, reason="still working", resume=resume)


def _closed(task_id: str, closing: asyncio.Future[TaskResult]) -> TaskAnswer:
    try:
        result = closing.result()
    except TaskEnded as err:
        return TaskAnswer(task_id=task_id, state=TaskPhase.FAILED.value, reason=str(err))
    except TaskNotFound as err:
        raise Refused(str(err)) from None
    return TaskAnswer(
        task_id=task_id, state=result.phase.value, output=result.final_output, reason=result.reason
    )


def _principal(ctx: Context) -> str:
    """The caller, as the guard authenticated them (the request's ASGI scope)."""
    request = ctx.request_context.request
    who = request.scope.get(PRINCIPAL) if request is not None else None
    if who is None:  # only when the app is served without its guard
        raise Refused("sign in: a bearer token (or the proxy's header)")
    return who


def build_mcp_app(
    client: Client, config: ApiConfig, tools: list[AgentTool], host: str = "127.0.0.1"
) -> ASGIApp:
    """The MCP server of ``tools`` behind the API's guard, as one ASGI application.

    Raises:
        McpToolError: the tools cannot be served as given.
    """
    served = AgentTools(client, config, tools)
    server = MCPServer(
        "agent-worker",
        instructions="Agents that run as durable tasks. A call answers the task's result, or what it "
        "waits for and how to wait again (task_result).",
    )

    def agent_tool(tool: AgentTool) -> Any:
        async def run(
            ctx: Context, prompt: Prompt, task_id: ChosenId = None, wait_seconds: Wait = DEFAULT_WAIT_SECONDS
        ) -> TaskAnswer:
            try:
                return await served.call(tool.name, _principal(ctx), prompt, task_id, wait_seconds)
            except Refused as err:
                raise ToolError(str(err)) from None

        return run

    for tool in tools:
        description = tool.description or (
            f"Run the agent {tool.spec.agent!r} as a durable task with your prompt; answers its result, or "
            "the approval it waits for."
        )
        server.add_tool(agent_tool(tool), name=tool.name, description=description)

    async def task_result(
        ctx: Context, task_id: StartedId, wait_seconds: Wait = DEFAULT_WAIT_SECONDS
    ) -> TaskAnswer:
        """Wait again for a task an agent tool started: its result, or what it still waits for."""
        try:
            return await served.result(_principal(ctx), task_id, wait_seconds)
        except Refused as err:
            raise ToolError(str(err)) from None

    server.add_tool(task_result, name="task_result")
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=config.max_body_bytes,
        host=host,
    )
    tokens = StreamTokens(config.stream_token_seconds, config.stream_token_secret, config.clock)
    return Guard(app, **guard_settings(config, tokens))


__all__ = ["MCP_PATH", "AgentTool", "AgentTools", "McpToolError", "TaskAnswer", "build_mcp_app"]
