"""The inbox's HTTP server: a Starlette application served by uvicorn on the caller's event loop
(the Temporal client's), as the HTTP API is. Routes::

    GET  /                       the viewer's inbox (every request they may decide, with controls)
    GET  /tasks/<id>             one task (with its live stream when the inbox has a stream backend;
                                 else it refreshes itself while it runs with nothing to decide)
    GET  /tasks/<id>/stream      the task's live stream, Server-Sent Events (``inbox.live``)
    POST /tasks/<id>/decide      approve / edit / reject (CSRF token; approver checked again); an
                                 approve may remember (``inbox.grants``)
    GET  /grants                 the remembered grants the viewer gave
    POST /grants/<id>/revoke     revoke one of them (CSRF token; only the viewer's own)
    GET  /login, POST /login     token mode: the token form (a pre-login cookie and the CSRF token
                                 bound to it), then a session cookie; wrong tokens are rate limited
                                 per client and in all (429 with Retry-After: ``inbox.auth``)
    POST /logout                 ends the session (CSRF token)
    GET  /live.js                the task page's one script, without authentication
    GET  /healthz                "ok", without authentication

Every page goes through ``InboxApp._page``: a POST's body is bounded and must be an HTML form, a
POST the browser marks as coming from another site (``Sec-Fetch-Site``) is refused before anything
else, the login included (see ``inbox.auth`` for the CSRF tokens), then the session is found (or
the login asked for) and a POST's CSRF token checked. Every response carries a strict
Content-Security-Policy (no script at all; the task page allows its one same-origin script,
``inbox.live``), ``no-store`` caching and framing denial. Task ids are matched percent-encoded
(``task_url`` encodes their slashes), so an id holding ``/`` or ``/decide`` is still one segment.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import structlog
from agent_worker.api.streams import resume_after
from agent_worker.inbox import live, pages
from agent_worker.inbox.auth import (
    LOGIN_COOKIE,
    LOGIN_COOKIE_SECONDS,
    Authenticator,
    LoginThrottle,
    Session,
    cookie_header,
    session_id_from,
    well_formed_cookie,
)
from agent_worker.inbox.grants_page import grants_page
from agent_worker.inbox.service import InboxError, InboxService
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from agent_worker.activities.grants import GrantStore
    from agent_worker.activities.stores.streams import StreamBackend
    from starlette.types import Message, Receive, Scope, Send

log = structlog.get_logger("agent_worker.inbox")

MAX_BODY = 256 * 1024
HANDLER_TIMEOUT = timedelta(seconds=60)
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

# The catch-all page answers every method (its 404 comes after the session check, as elsewhere).
_EVERY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_Handler = Callable[[Request, Session, dict[str, str]], Awaitable[Response]]


def _form(body: bytes) -> dict[str, str]:
    """An urlencoded form body, one value per field (the last one wins)."""
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in fields.items()}


def _html(status: int, body: str, headers: dict[str, str] | None = None) -> Response:
    return HTMLResponse(body, status, headers)


def _redirect(location: str, cookie: str | None = None) -> Response:
    response = RedirectResponse(location, 303)
    if cookie is not None:
        response.headers["Set-Cookie"] = cookie
    return response


class InboxApp:
    """The inbox as an ASGI application (``running_inbox`` serves it; any ASGI server can).

    Args:
        service: Temporal, and every check that guards a decision.
        auth: Who is looking (token or header mode, sessions, CSRF tokens).
        streams: The workers' stream backend, for the task page's live stream; None: no live stream.
        throttle: Failed sign-ins per client and in all (token mode); None: the defaults.
        grants: The state store's remembered grants; None: the grants pages answer 404.
    """

    def __init__(
        self,
        service: InboxService,
        auth: Authenticator,
        streams: StreamBackend | None = None,
        throttle: LoginThrottle | None = None,
        grants: GrantStore | None = None,
    ) -> None:
        self.service = service
        self.grants = grants
        self.auth = auth
        self.streams = streams
        self.throttle = throttle or LoginThrottle()
        page = self._page
        self._starlette = Starlette(
            routes=[
                Route("/healthz", self._healthz, methods=["GET"]),
                Route(live.SCRIPT_PATH, self._script, methods=["GET"]),
                Route("/login", page(self._login, signed_in=False), methods=["GET", "POST"]),
                Route("/", page(self._inbox), methods=["GET"]),
                Route("/tasks/{task_id}", page(self._task), methods=["GET"]),
                Route("/tasks/{task_id}/stream", page(self._stream, timeout=False), methods=["GET"]),
                Route("/tasks/{task_id}/decide", page(self._decide), methods=["POST"]),
                Route("/grants", page(self._grants), methods=["GET"]),
                Route("/grants/{grant_id}/revoke", page(self._revoke_grant), methods=["POST"]),
                Route("/logout", page(self._logout), methods=["POST"]),
                Route("/{rest:path}", page(self._no_page), methods=_EVERY_METHOD),
            ]
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._starlette(scope, receive, send)
            return
        # Route on the path as sent (percent-encoded), so ``%2F`` in a task id stays in its segment.
        raw = scope.get("raw_path") or scope["path"].encode()
        scope = {**scope, "path": raw.decode("latin-1").split("?", 1)[0]}

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                named = {k.decode("latin-1").lower() for k, _ in message.get("headers", [])}
                extra = [
                    (k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items() if k.lower() not in named
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self._starlette(scope, receive, secured)

    # ---- the guard every page passes -------------------------------------------------------------

    def _page(
        self, handler: _Handler, *, signed_in: bool = True, timeout: bool = True
    ) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` behind the checks in the module docstring; its errors become error pages.
        ``timeout``: a handler that has not answered within ``HANDLER_TIMEOUT`` gets a 504 (a
        stream's response is made in time; its body then runs as long as the task)."""

        async def endpoint(request: Request) -> Response:
            try:
                guarded = self._guarded(request, handler, signed_in)
                wait = HANDLER_TIMEOUT.total_seconds() if timeout else None
                return await asyncio.wait_for(guarded, wait)
            except InboxError as err:
                return _html(err.status, pages.error_page(err.status, str(err)))
            except TimeoutError:
                return _html(504, pages.error_page(504, "Temporal did not answer in time; try again"))
            except Exception as err:
                log.exception("inbox request failed", method=request.method, path=request.url.path)
                return _html(500, pages.error_page(500, f"the inbox failed on this request: {err}"))

        return endpoint

    async def _guarded(self, request: Request, handler: _Handler, signed_in: bool) -> Response:
        form = await self._read_form(request) if request.method == "POST" else {}
        fetched_from = request.headers.get("sec-fetch-site", "").lower()
        if request.method == "POST" and fetched_from in ("cross-site", "same-site"):
            # The browser says another site sent this form: a CSRF attempt, whatever it carries.
            raise InboxError("a form posted from another site is refused: use the inbox's own pages", 403)
        if not signed_in:
            return await handler(request, Session("", "", ""), form)
        session, new_cookie = self._session(request)
        if session is None:
            if self.auth.mode == "header":
                raise InboxError(
                    "no principal: requests must come through the proxy that sets "
                    f"{self.auth.principal_header}",
                    401,
                )
            if request.method == "GET":
                return _redirect("/login")
            raise InboxError("not signed in (or the session expired): sign in again", 401)
        if request.method == "POST" and not self.auth.csrf_ok(session, form.get("csrf")):
            raise InboxError("the form's CSRF token is missing or wrong: reload the page and try again", 403)
        response = await handler(request, session, form)
        if new_cookie:
            response.headers["Set-Cookie"] = cookie_header(session.session_id)
        return response

    @staticmethod
    async def _read_form(request: Request) -> dict[str, str]:
        """The POST's form, read only when it is one and at most ``MAX_BODY`` bytes long."""
        length = request.headers.get("content-length")
        if length is not None and not length.isdigit():
            raise InboxError("the request's Content-Length is not a number", 400)
        if length is not None and int(length) > MAX_BODY:
            raise InboxError(f"the form is larger than {MAX_BODY} bytes", 413)
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            raise InboxError("only HTML form posts are accepted", 415)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                raise InboxError(f"the form is larger than {MAX_BODY} bytes", 413)
        return _form(body)

    def _session(self, request: Request) -> tuple[Session | None, bool]:
        """The request's session, and whether its cookie is new (header mode, where none is kept)."""
        cookie_id = session_id_from(request.headers.get("cookie"))
        if self.auth.mode == "token":
            return self.auth.session(cookie_id), False
        principal = self.auth.principal_from_header(dict(request.headers))
        if principal is None:
            return None, False
        return self.auth.header_session(principal, cookie_id)

    # ---- pages -----------------------------------------------------------------------------------

    async def _healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def _script(self, request: Request) -> Response:
        return live.script_response()

    async def _inbox(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        entries = await self.service.inbox(session.principal)
        return _html(200, pages.inbox_page(session.principal, session.csrf, entries, self._previews))

    async def _task(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        view = await self.service.task(_task_id(request), session.principal)
        script = live.SCRIPT_PATH if self.streams is not None else None
        html = pages.task_page(session.principal, session.csrf, view, self._previews, live_script=script)
        headers = {"Content-Security-Policy": live.TASK_PAGE_CSP} if script else None
        return _html(200, html, headers)

    async def _stream(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        task_id = _task_id(request)
        await self.service.task(task_id, session.principal)  # 404 for who may not see the task
        if self.streams is None:
            raise InboxError("this inbox has no live stream (stream_backend=none)", 404)
        handle = self.service.client.get_workflow_handle(task_id)
        return await live.stream_response(
            self.streams, handle, resume_after(request.headers.get("last-event-id"))
        )

    async def _decide(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        task_id, principal = _task_id(request), session.principal
        outcome = await self.service.decide(task_id, principal, form)
        log.info(
            "inbox decision sent",
            task_id=task_id,
            request_id=outcome.request_id,
            principal=principal,
            decision=form.get("decision"),
            accepted=outcome.accepted,
        )
        page = pages.outcome_page(principal, session.csrf, task_id, outcome)
        return _html(200 if outcome.accepted else 409, page)

    def _grant_store(self) -> GrantStore:
        if self.grants is None:
            raise InboxError("this inbox has no grant store", 404)
        return self.grants

    async def _grants(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        found = await asyncio.to_thread(self._grant_store().listed, None, ended=True)
        mine = [g for g in found if g.principal == session.principal]
        return _html(200, grants_page(session.principal, session.csrf, mine))

    async def _revoke_grant(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        store, grant_id = self._grant_store(), request.path_params["grant_id"]
        grant = await asyncio.to_thread(store.get, grant_id)
        if grant is None or grant.principal != session.principal:
            raise InboxError(f"no grant {grant_id!r} among the grants {session.principal!r} gave", 404)
        reason = form.get("reason", "").strip()[:500] or "revoked in the inbox"
        await asyncio.to_thread(store.end, grant_id, "revoked", reason, session.principal)
        log.info("inbox grant revoked", grant_id=grant_id, principal=session.principal)
        return _redirect("/grants")

    async def _logout(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        self.auth.end_session(session.session_id)
        target = "/login" if self.auth.mode == "token" else "/"
        return _redirect(target, cookie_header("", max_age=0))

    async def _no_page(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        raise InboxError(f"no page {request.method} {unquote(request.url.path)}", 404)

    def _previews(self, request: Any) -> list[Any]:
        return self.service.previews(request.action)

    # ---- signing in (token mode) -----------------------------------------------------------------

    async def _login(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        if self.auth.mode != "token":
            return _redirect("/")
        if request.method not in ("GET", "POST"):
            raise InboxError(f"no page {request.method} /login", 404)
        login_cookie = session_id_from(request.headers.get("cookie"), LOGIN_COOKIE)
        if request.method == "GET":
            return self._login_page(200, login_cookie)
        if not self.auth.login_csrf_ok(login_cookie, form.get("csrf")):
            log.warning("inbox login refused: no pre-login cookie or a CSRF token not made for it")
            problem = "The sign-in form expired or was not sent from this page; sign in again here."
            return self._login_page(403, None, problem)
        client = request.client.host if request.client else "unknown"
        wait = self.throttle.retry_after(client)
        if wait is not None:
            log.warning("inbox login throttled: too many wrong tokens", client=client, retry_after=wait)
            problem = f"Too many failed sign-ins; try again in {wait} seconds."
            page = self._login_page(429, login_cookie, problem)
            page.headers["Retry-After"] = str(wait)
            return page
        principal = self.auth.principal_for_token(form.get("token", "").strip())
        if principal is None:
            self.throttle.failed(client)
            log.warning("inbox login refused: unknown token", client=client)
            return self._login_page(401, login_cookie, "That token is not valid.")
        self.throttle.succeeded(client)
        new = self.auth.new_session(principal)
        log.info("inbox login", principal=principal)
        return _redirect("/", cookie_header(new.session_id))

    def _login_page(self, status: int, login_cookie: str | None, problem: str | None = None) -> Response:
        """The login form with its CSRF token, setting the pre-login cookie it is bound to if new."""
        headers = {}
        if not well_formed_cookie(login_cookie):
            login_cookie = secrets.token_urlsafe(32)
            headers["Set-Cookie"] = cookie_header(
                login_cookie, max_age=LOGIN_COOKIE_SECONDS, name=LOGIN_COOKIE, path="/login"
            )
        assert login_cookie is not None
        return _html(status, pages.login_page(problem, csrf=self.auth.login_csrf(login_cookie)), headers)


def _task_id(request: Request) -> str:
    return unquote(request.path_params["task_id"])


__all__ = ["HANDLER_TIMEOUT", "MAX_BODY", "SECURITY_HEADERS", "InboxApp"]
