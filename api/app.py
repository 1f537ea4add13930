"""The HTTP API's routes (FastAPI; the OpenAPI document at ``/openapi.json``)::

    POST /v1/tasks                          start a task (201; 200 when the id exists already)
    GET  /v1/tasks/{id}                     its status while it runs, its result once closed
    GET  /v1/tasks/{id}/pending             the requests the caller may decide
    POST /v1/tasks/{id}/decisions           approve / edit / reject / respond / answer one of them
    POST /v1/tasks/{id}/input               follow-up input for the agent's next turn
    POST /v1/tasks/{id}/cancel              cancel it
    GET  /v1/grants                         the remembered grants the caller may see
    POST /v1/grants/{id}/revoke             revoke one: the next matching action asks again
    POST /v1/tasks/{id}/stream-token        a short-lived token to follow it from a browser
    GET  /v1/tasks/{id}/events              its events as Server-Sent Events (``Last-Event-ID`` resumes)
    GET  /v1/tasks/{id}/stream              its live stream (tokens, steps) as Server-Sent Events
    GET  /v1/tasks/{id}/steps               its steps, and POST .../fork a fork at one (``api.forks``)
    POST /v1/agui                           a task's run as AG-UI events (``api.agui``, docs/ag-ui.md)
    GET  /healthz                           "ok", without authentication

**Who.** The web inbox's authentication (``inbox.auth``): in ``token`` mode a bearer token
(``Authorization: Bearer <token>``, from the same tokens file), in ``header`` mode the principal a
trusted proxy names. **What.** A principal sees a task only when its policy names them as an
approver (else 404, the same answer as for a task that does not exist), decides only the requests
that name them (else 403, checked before anything reaches the task's history), and starts only
tasks whose policy names them. With ``tenants`` (principal -> tenants), a principal acts only within
their tenants. A task id the caller chooses is scoped to the spec's tenant (``<tenant>/<id>``), so
that starting an id another tenant uses starts a fresh task and tells nothing of theirs. Every
request first passes ``api.guard`` (Host, CORS, who, the body's size and type, open streams);
browsers follow a task with a stream token (``api.stream_tokens``).

Every call goes through ``agent_worker.client`` (the one owner of the workflow's protocol), and
every check through the inbox's service (``inbox.service``), so the API and the inbox answer alike.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from agent_worker.activities.grants import GrantStore
from agent_worker.activities.stores.streams import StreamBackend
from agent_worker.api.agui import add_agui_routes
from agent_worker.api.forks import add_fork_routes
from agent_worker.api.grants import mount_grant_routes
from agent_worker.api.guard import PRINCIPAL, Guard
from agent_worker.api.stream_tokens import StreamTokens
from agent_worker.api.streams import follow_events, follow_task, resume_after
from agent_worker.inbox.auth import Authenticator
from agent_worker.inbox.service import InboxError, InboxService, may_view
from agent_worker.schemas.approvals import ApprovalRequest, DecisionKind, DecisionOutcome
from agent_worker.schemas.config import DEFAULT_TASK_QUEUE, WorkerConfig
from agent_worker.schemas.events import Event
from agent_worker.schemas.grants import Remember
from agent_worker.schemas.tasks import TaskId, TaskResult, TaskSpec, TaskStatus
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client

from agent_worker.client import AgentWorkerClient
from agent_worker.decisions import Decision

_DEFAULTS = WorkerConfig()
# The bearer scheme, for the OpenAPI document (``api.guard`` authenticates).
BEARER = HTTPBearer(auto_error=False)
# What /events and /stream answer, for the OpenAPI document (and the clients generated from it): a
# text/event-stream, not JSON.
SSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `event:` the kind, `id:` the sequence number or offset, "
        "`data:` the entry as JSON (for /events, an `Event`); `gap` and `end` frames carry no `id:`.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


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
        max_body_bytes: The largest request body read (``api_max_body_bytes``).
        max_streams: Event streams one principal may hold open (``api_max_streams``).
        cors_origins: Browser origins allowed cross-origin (``api_cors_origins``).
        allowed_hosts: Header mode: ``Host`` names answered besides loopback (``api_allowed_hosts``).
        stream_token_seconds: How long a stream token is valid (``api_stream_token_minutes``).
        stream_token_secret: Their signing key (``api_stream_token_secret``); None: a random one.
        clock: Seconds since the epoch, for stream tokens' expiry.
        grants: The state store's remembered grants (``build_grant_store``); None: the grant
            routes answer 404.
    """

    auth: Authenticator
    task_queue: str = DEFAULT_TASK_QUEUE
    keys_dir: Path = field(default_factory=lambda: Path(".agent-worker/keys"))
    tenants: dict[str, list[str]] | None = None
    stored_events: Callable[[str, str | None], Iterable[Event]] | None = None
    streams: StreamBackend | None = None
    max_body_bytes: int = _DEFAULTS.api_max_body_bytes
    max_streams: int = _DEFAULTS.api_max_streams
    cors_origins: list[str] = field(default_factory=list)
    allowed_hosts: list[str] = field(default_factory=list)
    stream_token_seconds: float = _DEFAULTS.api_stream_token_minutes * 60
    stream_token_secret: bytes | None = None
    clock: Callable[[], float] = time.time
    grants: GrantStore | None = None


class StartRequest(BaseModel):
    """A task to start: its spec (what any Temporal client would send) and, optionally, its id."""

    spec: TaskSpec
    task_id: TaskId | None = None


class StartResponse(BaseModel):
    task_id: str = Field(description="The task's id: a chosen id scoped to its tenant, '<tenant>/<id>'.")
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
    remember: Remember | None = Field(
        default=None,
        description="With an approve: remember it as a grant (scope, when, until) that approves later "
        "matching actions without asking (the task's policy must have `grants`).",
    )
    answer: Any = Field(
        default=None,
        description="For 'answer': the answer to a question (ask_human): a text, one of its options, "
        "or a JSON value its form's schema accepts. One that does not fit is refused, naming the field.",
    )


class InputRequest(BaseModel):
    text: str = Field(min_length=1, max_length=64_000)


class StreamToken(BaseModel):
    """A token that opens one task's ``/events`` and ``/stream`` (as ``?access_token=``) until it
    expires; nothing else."""

    access_token: str
    expires_at: float = Field(description="Seconds since the epoch.")
    events_url: str = Field(description="The task's /events with the token, relative to the API.")
    stream_url: str = Field(description="The task's /stream with the token, relative to the API.")


def scoped_task_id(tenant: str, chosen: str) -> str:
    """The task id for an id the caller chose: within its tenant, ``<tenant>/<chosen>`` (unchanged
    when ``chosen`` is that already)."""
    return chosen if chosen.startswith(f"{tenant}/") else f"{tenant}/{chosen}"


def guard_settings(config: ApiConfig, tokens: StreamTokens) -> dict[str, Any]:
    """``api.guard.Guard``'s settings from the API's (the API and ``mcp-serve`` share its door)."""
    return {
        "auth": config.auth,
        "tokens": tokens,
        "max_body": config.max_body_bytes,
        "max_streams": config.max_streams,
        "cors_origins": config.cors_origins,
        "allowed_hosts": config.allowed_hosts,
    }


def build_api(client: Client, config: ApiConfig) -> FastAPI:
    """The API over a connected Temporal client (its data converter: the workers')."""
    tasks = AgentWorkerClient(client, config.task_queue)
    service = InboxService(client, config.keys_dir)
    app = FastAPI(
        title="agent-worker",
        version="1",
        description="Start, read, decide and follow durable agent tasks.",
    )

    stream_tokens = StreamTokens(config.stream_token_seconds, config.stream_token_secret, config.clock)
    app.add_middleware(Guard, **guard_settings(config, stream_tokens))

    def principal(request: Request, _: Annotated[Any, Depends(BEARER)] = None) -> str:
        """The caller, as ``api.guard`` authenticated them before anything was read (``BEARER``
        only names the scheme in the OpenAPI document)."""
        found = request.scope.get(PRINCIPAL)
        if found is None:  # only when the app is served without its guard
            raise HTTPException(401, "sign in", {"WWW-Authenticate": "Bearer"})
        return found

    Caller = Annotated[str, Depends(principal)]
    # Where a stream resumes: the header EventSource sends when it reconnects, or, for a new
    # EventSource (which cannot set headers), the query parameter; the header wins.
    LastEventId = Annotated[str | None, Header()]
    AfterId = Annotated[str | None, Query(alias="last_event_id")]
    # Read by the guard; named here for the OpenAPI document.
    AccessToken = Annotated[
        str | None, Query(description="A stream token (POST .../stream-token), for EventSource.")
    ]

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

    @app.post("/v1/tasks", status_code=201, response_model=StartResponse)
    async def start(body: StartRequest, who: Caller, response: Response) -> StartResponse:
        """Start a task; starting an id that exists starts nothing (the id is the task). A chosen id
        is scoped to the spec's tenant (``<tenant>/<id>``, the ``task_id`` answered)."""
        if not may_view(body.spec.policy, who):
            raise HTTPException(
                403, f"the task's policy does not name {who!r}: you could not see or decide it"
            )
        if not tenant_allowed(who, body.spec.tenant):
            raise HTTPException(403, f"{who!r} may not start tasks for tenant {body.spec.tenant!r}")
        if body.spec.started_by not in (None, who):
            raise HTTPException(403, f"started_by must be the caller, {who!r}, or left out")
        try:
            # The starter is who the API authenticated: a quorum never counts their approval.
            spec = TaskSpec.model_validate({**body.spec.model_dump(exclude_none=True), "started_by": who})
        except ValidationError as err:
            raise HTTPException(422, str(err)) from None
        chosen = scoped_task_id(body.spec.tenant, body.task_id) if body.task_id else None
        ref = await tasks.start(spec, chosen)
        if not ref.started:
            response.status_code = 200
        return StartResponse(task_id=ref.task_id, started=ref.started)

    @app.get("/v1/tasks/{task_id:path}/pending", response_model=list[ApprovalRequest])
    async def pending(task_id: str, who: Caller) -> list[ApprovalRequest]:
        """The task's pending requests that name the caller."""
        return (await visible(task_id, who)).decidable

    @app.post("/v1/tasks/{task_id:path}/decisions", response_model=DecisionOutcome)
    async def decide(task_id: str, body: DecisionRequest, who: Caller) -> DecisionOutcome:
        """Decide a pending request as the caller (refused before it reaches the task when the request
        does not name them)."""
        # One read (the status query) and the update: no describe, no history read (the update's
        # validator checks again what the read checked).
        decision = Decision(
            request_id=body.request_id,
            kind=body.decision.value,
            principal=who,
            version=body.version,
            reason=(body.reason or "").strip() or None,
            edited_args=(body.edited_args or {}) if body.decision is DecisionKind.EDIT else None,
            edit_given="changes",
            answer=body.answer,
            remember=body.remember.model_dump(mode="json", exclude_none=True) if body.remember else None,
        )
        try:
            return await service.submit(
                task_id, decision, visible_in=lambda tenant: tenant_allowed(who, tenant)
            )
        except InboxError as err:
            raise HTTPException(err.status, str(err)) from None

    @app.post("/v1/tasks/{task_id:path}/input", status_code=202)
    async def add_input(task_id: str, body: InputRequest, who: Caller) -> dict[str, str]:
        """Follow-up input: the agent's next turn sees it (the task records refused input as ignored)."""
        await visible(task_id, who)
        await tasks.say(task_id, body.text, principal=who)
        return {"task_id": task_id, "queued": "for the next turn"}

    @app.post("/v1/tasks/{task_id:path}/cancel", status_code=202)
    async def cancel(task_id: str, who: Caller) -> dict[str, str]:
        """Ask the task to cancel (its sandbox is destroyed; a write in flight settles first)."""
        await visible(task_id, who)
        await tasks.cancel(task_id)
        return {"task_id": task_id, "cancel": "requested"}

    @app.post("/v1/tasks/{task_id:path}/stream-token", response_model=StreamToken)
    async def stream_token(task_id: str, who: Caller) -> StreamToken:
        """A token for a browser's ``EventSource``, which cannot send a bearer token: it opens this
        task's ``/events`` and ``/stream`` as ``?access_token=<token>`` until it expires
        (``api_stream_token_minutes``), and nothing else."""
        await visible(task_id, who)
        token, expires = stream_tokens.issue(who, task_id)
        base = f"/v1/tasks/{quote(task_id, safe='/')}"
        return StreamToken(
            access_token=token,
            expires_at=expires,
            events_url=f"{base}/events?access_token={token}",
            stream_url=f"{base}/stream?access_token={token}",
        )

    @app.get("/v1/tasks/{task_id:path}/events", response_class=StreamingResponse, responses=SSE_RESPONSES)
    async def events(
        task_id: str,
        who: Caller,
        last_event_id: LastEventId = None,
        after_id: AfterId = None,
        access_token: AccessToken = None,
    ) -> StreamingResponse:
        """The task's events as Server-Sent Events (``id`` = the event's sequence number), until the
        task closes. ``Last-Event-ID`` (or ``?last_event_id=``) resumes after that event. The
        stream merges the delivered events (the event sink, when the API can read it) with the
        task's newest ones (its ``status`` query); events neither holds any more are announced by
        a ``gap`` event naming them, never skipped silently."""
        await visible(task_id, who)
        after = resume_after(last_event_id or after_id)
        chain = (await tasks.handle(task_id).describe()).raw_description.workflow_execution_info.first_run_id
        stored = config.stored_events
        read_stored = (lambda: list(stored(task_id, chain or None))) if stored else None
        return StreamingResponse(
            follow_events(tasks, task_id, after, read_stored), media_type="text/event-stream"
        )

    @app.get("/v1/tasks/{task_id:path}/stream", response_class=StreamingResponse, responses=SSE_RESPONSES)
    async def stream(
        task_id: str,
        who: Caller,
        last_event_id: LastEventId = None,
        after_id: AfterId = None,
        access_token: AccessToken = None,
    ) -> StreamingResponse:
        """The task's live stream as Server-Sent Events (``event`` = the entry's kind: token,
        tool_call, tool_result, step, superseded; ``id`` = its offset), until the task closes.
        ``Last-Event-ID`` (or ``?last_event_id=``) resumes after that offset with no gap and no
        repeat; entries past the stream's retention are announced by a ``gap`` event. A
        ``superseded`` entry voids earlier entries it names (a retried turn's partial answer)."""
        await visible(task_id, who)
        if config.streams is None:
            raise HTTPException(404, "this API has no live stream (stream_backend=none)")
        frames = await follow_task(
            config.streams, tasks.handle(task_id), resume_after(last_event_id or after_id)
        )
        return StreamingResponse(
            frames,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    mount_grant_routes(app, principal, config.grants, tenant_allowed, config.tenants is not None)

    async def tenant_of(task_id: str) -> str:
        spec = await service.spec(tasks.handle(task_id))
        return spec.tenant if spec else "default"

    add_fork_routes(app, tasks, visible, Caller, scoped_task_id, tenant_of)
    add_agui_routes(
        app, principal=principal, visible=visible, service=service, tasks=tasks, streams=config.streams
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
