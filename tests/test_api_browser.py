"""A browser app follows a task through the HTTP API, against a real dev server and worker: a page
served from another origin, in headless Chromium, asks for a stream token with its bearer token
(CORS), follows the task's events with EventSource, sees them before the approval, and, when the
API's connection is cut (the API restarts), resumes with Last-Event-ID with no event lost or
repeated. A stream token opens only its own task's streams, and only until it expires; CORS allows
only the origins configured."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
from agent_worker.activities.events import JsonlEventSink
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox.auth import Authenticator
from agent_worker.inbox.serve import serving
from agent_worker.schemas.events import EventType
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.helpers.browser import chromium
from tests.helpers.support import TaskEnv, example_spec, until

LEAD = "lead-0f3c9a7e51d2b8c4"
STRANGER = "mallory-7d1e2f9a0b3c"
TOKENS = {LEAD: "finance-lead", STRANGER: "mallory"}
SECRET = b"one key for every API process behind the balancer"

# The browser app: a stream token by fetch (bearer token, CORS), then EventSource on the task's events.
PAGE = """<!doctype html><html><body><pre id="log"></pre><script>
const q = new URLSearchParams(location.search);
window.seen = []; window.opened = 0; window.problems = [];
async function follow() {
  const reply = await fetch(q.get("api") + "/v1/tasks/" + q.get("task") + "/stream-token", {
    method: "POST", body: "{}",
    headers: {"Authorization": "Bearer " + q.get("token"), "Content-Type": "application/json"}});
  if (!reply.ok) { window.problems.push("stream-token " + reply.status); return; }
  const token = await reply.json();
  const source = new EventSource(q.get("api") + token.events_url);
  source.onopen = () => { window.opened += 1; };
  for (const kind of KINDS) {
    source.addEventListener(kind, (e) => {
      window.seen.push([kind, e.lastEventId]);
      document.getElementById("log").textContent += kind + " " + e.lastEventId + "\\n";
      if (kind === "end") source.close();
    });
  }
}
follow().catch((err) => window.problems.push(String(err)));
</script></body></html>"""


def page_app() -> Starlette:
    kinds = json.dumps([k.value for k in EventType] + ["gap", "end", "error"])

    async def page(request: Any) -> HTMLResponse:
        return HTMLResponse(PAGE.replace("KINDS", kinds))

    return Starlette(routes=[Route("/", page)])


def api_app(env: TaskEnv, origins: list[str], clock: Callable[[], float] = time.time) -> Any:
    config = ApiConfig(
        auth=Authenticator("token", TOKENS),
        task_queue=env.task_queue,
        stored_events=JsonlEventSink(env.config.events_dir).read_chain,
        cors_origins=origins,
        stream_token_secret=SECRET,
        clock=clock,
    )
    return build_api(env.client, config)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_page_on_another_origin_follows_a_task_and_resumes_after_a_cut(env: TaskEnv) -> None:
    """The page gets a stream token cross-origin, sees the task's events up to its approval request
    before anyone decides, keeps following across a restart of the API (EventSource reconnects with
    Last-Event-ID), and ends with every event once, in order, through the task's end."""
    handle = await env.start(example_spec())
    driver = await asyncio.to_thread(chromium)
    try:
        async with serving(page_app(), "127.0.0.1:0") as page_url:
            page_origin = page_url
            async with serving(api_app(env, [page_origin]), "127.0.0.1:0") as api_url:
                await asyncio.to_thread(
                    driver.get, f"{page_url}/?api={api_url}&task={handle.id}&token={LEAD}"
                )

                def seen() -> list[list[str]]:
                    return driver.execute_script("return window.seen")

                def problems() -> list[str]:
                    return driver.execute_script("return window.problems")

                async def asked() -> bool:
                    assert not await asyncio.to_thread(problems)
                    return "approval.requested" in [k for k, _ in await asyncio.to_thread(seen)]

                await until(asked, 90, "the page to see the approval request")
                before_cut = len(await asyncio.to_thread(seen))
            # The API is gone (its streams cut); the same API comes back on the same port.
            async with serving(api_app(env, [page_origin]), api_url.removeprefix("http://")) as again:
                assert again == api_url

                async def reopened() -> bool:
                    return await asyncio.to_thread(driver.execute_script, "return window.opened") >= 2

                await until(reopened, 90, "EventSource to reconnect")
                [request] = (await env.awaiting_approval(handle)).pending
                async with httpx.AsyncClient(base_url=api_url, timeout=60) as http:
                    decided = await http.post(
                        f"/v1/tasks/{handle.id}/decisions",
                        json={
                            "request_id": request.request_id,
                            "version": request.version,
                            "decision": "approve",
                        },
                        headers=bearer(LEAD),
                    )
                    assert decided.status_code == 200 and decided.json()["accepted"], decided.text

                async def ended() -> bool:
                    return [k for k, _ in await asyncio.to_thread(seen)][-1:] == ["end"]

                await until(ended, 120, "the page to see the task end")
                frames = await asyncio.to_thread(seen)
    finally:
        await asyncio.to_thread(driver.quit)
    assert ["error", None] in frames  # EventSource's own error event: it saw the connection cut
    ids = [int(i) for k, i in frames if k not in ("end", "gap", "error")]
    assert ids == list(range(1, len(ids) + 1)), ids  # every event once, in order, none missing
    assert "gap" not in [k for k, _ in frames]
    assert 0 < before_cut < len(frames)
    kinds = [k for k, _ in frames]
    assert kinds.index("approval.requested") < kinds.index("approval.decided") < kinds.index("task.finished")


async def test_a_stream_token_opens_only_its_own_tasks_streams_and_only_until_it_expires(
    env: TaskEnv,
) -> None:
    """A stream token opens its task's /events (resuming after ?last_event_id=); not another task's,
    not the task's other routes, not as a bearer token, not once its minutes have passed; a
    principal who may not see the task gets no token (404, as for a task that does not exist)."""
    now = [time.time()]
    first, second = await env.start(example_spec()), await env.start(example_spec())
    await env.awaiting_approval(first)
    async with (
        serving(api_app(env, [], clock=lambda: now[0]), "127.0.0.1:0") as url,  # streams need a server
        httpx.AsyncClient(base_url=url, timeout=60) as api,
    ):
        reply = await api.post(f"/v1/tasks/{first.id}/stream-token", json={}, headers=bearer(LEAD))
        assert reply.status_code == 200, reply.text
        token = reply.json()["access_token"]
        assert reply.json()["events_url"] == f"/v1/tasks/{first.id}/events?access_token={token}"

        async def opens(path: str, **options: Any) -> int:
            async with api.stream("GET", path, **options) as answer:
                return answer.status_code

        refused = await api.post(f"/v1/tasks/{first.id}/stream-token", json={}, headers=bearer(STRANGER))
        assert refused.status_code == 404
        mine = f"/v1/tasks/{first.id}/events?access_token={token}"
        assert await opens(mine) == 200
        async with api.stream("GET", mine + "&last_event_id=3") as resumed:  # a new EventSource's resume
            first_id = await anext(line async for line in resumed.aiter_lines() if line.startswith("id: "))
        assert first_id == "id: 4"
        assert await opens(f"/v1/tasks/{second.id}/events?access_token={token}") == 401
        assert await opens(f"/v1/tasks/{second.id}/stream?access_token={token}") == 401
        for route in ("", "/pending"):
            assert (await api.get(f"/v1/tasks/{first.id}{route}?access_token={token}")).status_code == 401
        cancel = await api.post(f"/v1/tasks/{first.id}/cancel?access_token={token}", json={})
        assert cancel.status_code == 401
        assert await opens(f"/v1/tasks/{first.id}/events", headers=bearer(token)) == 401
        assert await opens(mine.replace(token, token[:-2] + "xx")) == 401
        now[0] += 10 * 60 - 5
        assert await opens(mine) == 200
        now[0] += 10
        assert await opens(mine) == 401  # expired
    await env.cancel(first)
    await env.cancel(second)


async def test_cors_allows_only_the_configured_origins(env: TaskEnv) -> None:
    """A preflight from a configured origin is answered with the methods and headers the API takes
    and its answers carry that origin; another origin's preflight is refused and its answers carry
    no CORS header; with no origin configured, none is allowed."""
    app_origin, other = "http://app.example:3000", "http://evil.example"
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    for origins in ([app_origin], []):
        transport = httpx.ASGITransport(app=api_app(env, origins))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
            path = "/v1/tasks/acme/none/stream-token"
            allowed = await api.options(path, headers=preflight | {"Origin": app_origin})
            refused = await api.options(path, headers=preflight | {"Origin": other})
            assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
            read = await api.get("/v1/tasks/acme/none", headers=bearer(LEAD) | {"Origin": other})
            assert read.status_code == 404 and "access-control-allow-origin" not in read.headers
            if not origins:
                assert allowed.status_code == 403 and "access-control-allow-origin" not in allowed.headers
                continue
            assert allowed.status_code == 204
            assert allowed.headers["access-control-allow-origin"] == app_origin
            assert "Authorization" in allowed.headers["access-control-allow-headers"]
            assert "Last-Event-ID" in allowed.headers["access-control-allow-headers"]
            read = await api.get("/v1/tasks/acme/none", headers=bearer(LEAD) | {"Origin": app_origin})
            assert read.headers["access-control-allow-origin"] == app_origin
