"""The HTTP API's routes (FastAPI; the OpenAPI document at ``/openapi.json``)::

    POST /v1/tasks                          start a task (201; 200 when the id exists already)
    GET  /v1/tasks/{id}                     its status while it runs, its result once closed
    GET  /v1/tasks/{id}/pending             the requests the caller may decide
    POST /v1/tasks/{id}/decisions           approve / edit / reject one of them
    POST /v1/tasks/{id}/input               follow-up input for the agent's next turn
    POST /v1/tasks/{id}/cancel              cancel it
    GET  /v1/tasks/{id}/events              its events as Server-Sent Events (``Last-Event-ID`` resumes)
    GET  /v1/tasks/{id}/stream              its live stream (tokens, steps) as Server-Sent Events
    GET  /healthz                           "ok", without authentication

**Who.** The web inbox's authentication (``inbox.auth``): in ``token`` mode a bearer token
(``Authorization: Bearer <token>``, from the same tokens file), in ``header`` mode the principal a
trusted proxy names. **What.** A principal sees a task only when its policy names them as an
approver (else 404, the same answer as for a task that does not exist), decides only the requests
that name them (else 403, checked before anything reaches the task's history), and starts only
tasks whose policy names them. With ``tenants`` (principal -> tenants), a principal acts only within
their tenants. A POST must be JSON and not come from a browser page on another site.

Every call goes through ``agent_worker.client`` (the one owner of the workflow's protocol), and
every check through the inbox's service (``inbox.service``), so the API and the inbox answer alike.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel, Field
from temporalio.client import Client

from activities.stores.streams import StreamBackend
from agent_worker.client import AgentWorkerClient, AgentWorkerError, TaskNotFound
from api.streams import follow_task, resume_after
from inbox.auth import Authenticator
from inbox.service import InboxError, InboxService, may_view
from schemas.approvals import ApprovalRequest, DecisionKind, DecisionOutcome
from schemas.config import DEFAULT_TASK_QUEUE
from schemas.events import Event
from schemas.tasks import TaskId, TaskResult, TaskSpec, TaskStatus

# How often the event stream asks a running task for its newest events.
POLL_SECONDS = 0.5
# How long an event stream waits, after the task's phase turned terminal, for the task to close.
CLOSE_WAIT_SECONDS = 30


@dataclass
class ApiConfig:
    """How the API authenticates, and where tasks go.

    Attributes:
        auth: The inbox's authenticator (token or header mode).
        task_queue: Where started tasks go.
        keys_dir: Principals' signing keys, for tasks whose policy requires signed decisions.
        tenants: Principal -> the tenants they may act in; None: any tenant their policies name them in.
        stored_events: Reads a task's delivered events (the event sink: ``read_chain(task_id,
            chain)``), so the event stream is whole however far a reader is behind; None: only the
            task's newest events (its ``status`` query).
        streams: The workers' stream backend (``stream_backend``), for the live stream; None:
            the stream route answers 404.
    """

    auth: Authenticator
    task_queue: str = DEFAULT_TASK_QUEUE
    keys_dir: Path = field(default_factory=lambda: Path(".agent-worker/keys"))
    tenants: dict[str, list[str]] | None = None
    stored_events: Callable[[str, str | None], Iterable[Event]] | None = None
    streams: StreamBackend | None = None


class StartRequest(BaseModel):
    """A task to start: its spec (what any Temporal client would send) and, optionally, its id."""

    spec: TaskSpec
    task_id: TaskId | None = None


class StartResponse(BaseModel):
    task_id: str
    started: bool = Field(description="False when a task with this id existed already (nothing started).")


class TaskView(BaseModel):
    """A task as the caller may see it."""

    task_id: str
    running: bool
    status: TaskStatus | None = None
    result: TaskResult | None = None
    problem: str | None = None


class DecisionRequest(BaseModel):
    """A decision on one pending request; the principal is the caller's."""

    request_id: str
    version: str
    decision: DecisionKind
    reason: str | None = Field(default=None, max_length=4000)
    edited_args: dict[str, Any] | None = Field(
        default=None, description="For an edit: the arguments to change (the others stay as proposed)."
    )


class InputRequest(BaseModel):
    text: str = Field(min_length=1, max_length=64_000)


def build_api(client: Client, config: ApiConfig) -> FastAPI:
    """The API over a connected Temporal client (its data converter: the workers')."""
    tasks = AgentWorkerClient(client, config.task_queue)
    service = InboxService(client, config.keys_dir)
    app = FastAPI(
        title="agent-worker",
        version="1",
        description="Start, read, decide and follow durable agent tasks.",
    )

    def principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
        auth = config.auth
        if auth.mode == "header":
            found = auth.principal_from_header({k.lower(): v for k, v in request.headers.items()})
        else:
            scheme, _, token = (authorization or "").partition(" ")
            found = auth.principal_for_token(token.strip()) if scheme.lower() == "bearer" else None
        if found is None:
            raise HTTPException(
                401, "sign in: a bearer token (or the proxy's header)", {"WWW-Authenticate": "Bearer"}
            )
        return found

    def same_site(request: Request) -> None:
        # A bearer token is never sent by a browser on its own; the trusted header may be: a POST
        # from a page on another site must not ride on it.
        if request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            raise HTTPException(403, "cross-site requests are refused")

    Caller = Annotated[str, Depends(principal)]

    def tenant_allowed(who: str, tenant: str) -> bool:
        return config.tenants is None or tenant in config.tenants.get(who, [])

    async def visible(task_id: str, who: str) -> Any:
        """The inbox's view of the task for ``who`` (404 when they may not see it)."""
        try:
            view = await service.task(task_id, who)
        except InboxError as err:
            raise HTTPException(err.status, str(err)) from None
        spec = await service.spec(tasks.handle(task_id))
        if spec is None or not tenant_allowed(who, spec.tenant):
            raise HTTPException(404, f"no task {task_id!r} among the tasks {who!r} may see")
        return view

    @app.get("/healthz", response_class=PlainTextResponse, include_in_schema=False)
    async def healthz() -> str:
        return "ok"

    @app.post("/v1/tasks", status_code=201, response_model=StartResponse, dependencies=[Depends(same_site)])
    async def start(body: StartRequest, who: Caller, response: Response) -> StartResponse:
        """Start a task; starting an id that exists starts nothing (the id is the task)."""
        if not may_view(body.spec.policy, who):
            raise HTTPException(
                403, f"the task's policy does not name {who!r}: you could not see or decide it"
            )
        if not tenant_allowed(who, body.spec.tenant):
            raise HTTPException(403, f"{who!r} may not start tasks for tenant {body.spec.tenant!r}")
        ref = await tasks.start(body.spec, body.task_id)
        if not ref.started:
            response.status_code = 200
        return StartResponse(task_id=ref.task_id, started=ref.started)

    @app.get("/v1/tasks/{task_id:path}/pending", response_model=list[ApprovalRequest])
    async def pending(task_id: str, who: Caller) -> list[ApprovalRequest]:
        """The task's pending requests that name the caller."""
        return (await visible(task_id, who)).decidable

    @app.post(
        "/v1/tasks/{task_id:path}/decisions",
        response_model=DecisionOutcome,
        dependencies=[Depends(same_site)],
    )
    async def decide(task_id: str, body: DecisionRequest, who: Caller) -> DecisionOutcome:
        """Decide a pending request as the caller (refused before it reaches the task when the request
        does not name them)."""
        view = await visible(task_id, who)
        form = {"request_id": body.request_id, "version": body.version, "decision": body.decision.value}
        if body.reason:
            form["reason"] = body.reason
        if body.decision is DecisionKind.EDIT:
            request = next((r for r in view.decidable if r.request_id == body.request_id), None)
            proposed = request.action.arguments if request else {}
            form["edited_args"] = json.dumps({**proposed, **(body.edited_args or {})})
        try:
            return await service.decide(task_id, who, form)
        except InboxError as err:
            raise HTTPException(err.status, str(err)) from None

    @app.post("/v1/tasks/{task_id:path}/input", status_code=202, dependencies=[Depends(same_site)])
    async def add_input(task_id: str, body: InputRequest, who: Caller) -> dict[str, str]:
        """Follow-up input: the agent's next turn sees it (the task records refused input as ignored)."""
        await visible(task_id, who)
        await tasks.say(task_id, body.text, principal=who)
        return {"task_id": task_id, "queued": "for the next turn"}

    @app.post("/v1/tasks/{task_id:path}/cancel", status_code=202, dependencies=[Depends(same_site)])
    async def cancel(task_id: str, who: Caller) -> dict[str, str]:
        """Ask the task to cancel (its sandbox is destroyed; a write in flight settles first)."""
        await visible(task_id, who)
        await tasks.cancel(task_id)
        return {"task_id": task_id, "cancel": "requested"}

    @app.get("/v1/tasks/{task_id:path}/events")
    async def events(
        task_id: str, who: Caller, last_event_id: Annotated[str | None, Header()] = None
    ) -> StreamingResponse:
        """The task's events as Server-Sent Events (``id`` = the event's sequence number), until the
        task closes. ``Last-Event-ID`` resumes after that event. The stream merges the delivered
        events (the event sink, when the API can read it) with the task's newest ones (its
        ``status`` query); events neither holds any more are announced by a ``gap`` event naming
        them, never skipped silently."""
        await visible(task_id, who)
        after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
        chain = (await tasks.handle(task_id).describe()).raw_description.workflow_execution_info.first_run_id
        stored = config.stored_events
        read_stored = (lambda: list(stored(task_id, chain or None))) if stored else None
        return StreamingResponse(_follow(tasks, task_id, after, read_stored), media_type="text/event-stream")

    @app.get("/v1/tasks/{task_id:path}/stream")
    async def stream(
        task_id: str, who: Caller, last_event_id: Annotated[str | None, Header()] = None
    ) -> StreamingResponse:
        """The task's live stream as Server-Sent Events (``event`` = the entry's kind: token,
        tool_call, tool_result, step, superseded; ``id`` = its offset), until the task closes.
        ``Last-Event-ID`` resumes after that offset with no gap and no repeat; entries past the
        stream's retention are announced by a ``gap`` event. A ``superseded`` entry voids earlier
        entries it names (a retried turn's partial answer)."""
        await visible(task_id, who)
        if config.streams is None:
            raise HTTPException(404, "this API has no live stream (stream_backend=none)")
        frames = await follow_task(config.streams, tasks.handle(task_id), resume_after(last_event_id))
        return StreamingResponse(
            frames,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get("/v1/tasks/{task_id:path}", response_model=TaskView)
    async def read(task_id: str, who: Caller) -> TaskView:
        """The task's status while it runs, its result once it has closed."""
        view = await visible(task_id, who)
        return TaskView(
            task_id=task_id,
            running=view.running,
            status=view.status,
            result=view.result,
            problem=view.problem,
        )

    return app


async def _follow(
    tasks: AgentWorkerClient, task_id: str, after: int, read_stored: Callable[[], list[Event]] | None
) -> AsyncIterator[bytes]:
    """SSE frames of the task's events after sequence number ``after``, then ``end``. The phase turns
    terminal before the task has delivered its last events and closed; ``end`` comes once it has
    closed (or ``CLOSE_WAIT_SECONDS`` later), after the events it recorded meanwhile, so that a reader
    who reads the task on ``end`` finds its result."""
    seen = after
    closed = False
    while True:
        try:
            status = await tasks.status(task_id, wait_seconds=10)
        except (TaskNotFound, AgentWorkerError) as err:
            yield _frame("error", {"detail": str(err)})
            return
        known = {e.seq: e for e in status.last_events}
        if read_stored is not None and (not known or min(known) > seen + 1):
            known.update({e.seq: e for e in await asyncio.to_thread(read_stored) if e.seq > seen})
        fresh = sorted((e for e in known.values() if e.seq > seen), key=lambda e: e.seq)
        if fresh and fresh[0].seq > seen + 1:
            yield _frame("gap", {"missed_from": seen + 1, "missed_to": fresh[0].seq - 1})
        for event in fresh:
            seen = event.seq
            yield _frame(event.type.value, _event_json(event), event.seq)
        if status.phase.terminal and not closed:
            closed = True
            with contextlib.suppress(AgentWorkerError, TimeoutError):
                await asyncio.wait_for(tasks.result(task_id), CLOSE_WAIT_SECONDS)
            continue  # once more: the events it recorded as it closed
        if status.phase.terminal:
            yield _frame("end", {"phase": status.phase.value, "reason": status.reason})
            return
        await asyncio.sleep(POLL_SECONDS)


def _event_json(event: Event) -> dict[str, Any]:
    return event.model_dump(mode="json", by_alias=True)


def _frame(kind: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    lines = [f"event: {kind}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"data: {json.dumps(data, separators=(',', ':'))}")
    return ("\n".join(lines) + "\n\n").encode()
