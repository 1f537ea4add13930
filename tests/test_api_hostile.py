"""The HTTP API against hostile clients: `agent-worker api` runs as its own process against the real
dev server (its memory measured from /proc), while a worker runs the tasks. A huge anonymous body is
refused before it is read; so is a huge authenticated one, declared or chunked; slow headers are cut
off; a flood of streams from one principal stops at its cap; header mode answers only its own Host
names; every POST must be JSON; and a task of another tenant answers exactly as a task that does not
exist, the start of its id included."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox.auth import Authenticator

from tests.helpers.serving import serving_process
from tests.helpers.support import TaskEnv, example_spec, until

LEAD = "lead-0f3c9a7e51d2b8c4"
GLOBEX = "globex-lead-5a6b7c8d9e"
TOKENS = {LEAD: "finance-lead", GLOBEX: "globex-lead"}
TENANTS = {"finance-lead": ["acme"], "globex-lead": ["globex"]}
BIG = 24 * 1024 * 1024
MB = 1024 * 1024


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def peak_rss(pid: int) -> int:
    """The most resident memory the process has held so far, in bytes (VmHWM: a body parsed and
    freed again still shows in it)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


@contextlib.asynccontextmanager
async def api_process(env: TaskEnv, tmp_path: Path, **settings: str) -> AsyncIterator[tuple[str, int]]:
    """`agent-worker api` in its own process, serving ``env``'s task queue; its URL and pid."""
    async with (
        serving_process(env, tmp_path, ["api"], tokens=TOKENS, tenants=TENANTS, **settings) as (url, pid),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        # Warm up what the first real request loads, so growth measured later is the request's.
        assert (await http.get("/v1/tasks/acme/none", headers=bearer(LEAD))).status_code == 404
        yield url, pid


class _Exchange(asyncio.Protocol):
    """One raw HTTP exchange: what the server answered, kept even when it resets the connection
    (it closes without reading a refused body, so the sender's later bytes meet a reset)."""

    def __init__(self) -> None:
        self.answer = bytearray()
        self.closed = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.answer += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


async def raw_post(url: str, headers: dict[str, str], body_size: int, *, chunked: bool = False) -> int:
    """POST ``body_size`` bytes of valid JSON (a list of numbers) to /v1/tasks over a raw socket,
    the whole body written at once behind the headers; the answer's status."""
    host, port = url.removeprefix("http://").split(":")
    transport, exchange = await asyncio.get_running_loop().create_connection(_Exchange, host, int(port))
    head = {"Host": f"{host}:{port}", "Content-Type": "application/json", **headers}
    head |= {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(body_size)}
    body = b'{"spec": {"x": [' + b"1," * ((body_size - 20) // 2) + b"1]}}"
    body += b" " * (body_size - len(body))
    if chunked:
        piece = 64 * 1024
        body = b"".join(
            b"%x\r\n%s\r\n" % (len(c), c) for c in (body[i : i + piece] for i in range(0, len(body), piece))
        )
        body += b"0\r\n\r\n"
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    transport.write(b"POST /v1/tasks HTTP/1.1\r\n" + lines.encode() + b"\r\n" + body)
    await asyncio.wait_for(exchange.closed.wait(), 120)  # every refusal closes the connection
    assert exchange.answer, "the API answered nothing"
    return int(exchange.answer.split(b"\r\n", 1)[0].split()[1])


async def test_huge_bodies_are_refused_before_they_are_read(env: TaskEnv, tmp_path: Path) -> None:
    """A 24 MB anonymous JSON body is refused (401) before it is read, as are 24 MB authenticated
    ones declared by Content-Length or sent chunked (413): the API's peak RSS grows by under 20 MB."""
    async with api_process(env, tmp_path) as (url, pid):
        before = peak_rss(pid)
        assert await raw_post(url, {}, BIG) == 401
        assert await raw_post(url, bearer(LEAD), BIG) == 413
        assert await raw_post(url, bearer(LEAD), BIG, chunked=True) == 413
        grown = peak_rss(pid) - before
    assert grown < 20 * MB, f"the API grew by {grown / MB:.1f} MB"


async def test_a_flood_of_streams_stops_at_the_principals_cap_and_anonymous_floods_cost_nothing(
    env: TaskEnv, tmp_path: Path
) -> None:
    """With api_max_streams=3, a principal's fourth and later concurrent streams get 429 while three
    stay open, and a closed one frees its place; a hundred anonymous 1 MB requests at once grow the
    API's peak RSS by under 20 MB."""
    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    async with (
        api_process(env, tmp_path, api_max_streams="3") as (url, pid),
        httpx.AsyncClient(base_url=url, timeout=60) as http,
        contextlib.AsyncExitStack() as open_streams,
    ):
        path = f"/v1/tasks/{handle.id}/events"
        for _ in range(3):
            held = await open_streams.enter_async_context(http.stream("GET", path, headers=bearer(LEAD)))
            assert held.status_code == 200
        flood = await asyncio.gather(*(http.get(path, headers=bearer(LEAD)) for _ in range(20)))
        assert {r.status_code for r in flood} == {429}
        assert "open streams" in flood[0].json()["detail"]
        other = await http.get(f"/v1/tasks/{handle.id}", headers=bearer(LEAD))
        assert other.status_code == 200  # only streams are capped
        await open_streams.aclose()

        async def reopened() -> bool:  # the API frees a place once it has seen the client go
            async with http.stream("GET", path, headers=bearer(LEAD)) as again:
                assert again.status_code in (200, 429)
                return again.status_code == 200

        await until(reopened, 60, "a closed stream to free its place")

        before = peak_rss(pid)
        statuses = await asyncio.gather(*(raw_post(url, {}, MB) for _ in range(100)))
        assert set(statuses) == {401}
        grown = peak_rss(pid) - before
    assert grown < 20 * MB, f"the API grew by {grown / MB:.1f} MB"
    await env.cancel(handle)


async def test_slow_headers_are_cut_off(env: TaskEnv, tmp_path: Path) -> None:
    """A connection that never finishes its request's headers is closed by the API
    (api_header_timeout_seconds), not held open for good."""
    async with api_process(env, tmp_path, api_header_timeout_seconds="1") as (url, _):
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 60) == b""  # closed, nothing answered
        writer.close()


def in_process(env: TaskEnv, auth: Authenticator, **options: object) -> httpx.AsyncClient:
    config = ApiConfig(auth=auth, task_queue=env.task_queue, tenants=TENANTS, **options)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=build_api(env.client, config))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8091", timeout=60)


async def test_header_mode_answers_only_its_own_host_names(env: TaskEnv) -> None:
    """In header mode a request whose Host is not loopback, localhost or an allowed name gets 421
    (DNS rebinding), whatever principal header it carries; its own names pass."""
    auth = Authenticator("header")
    user = {"X-Forwarded-User": "finance-lead"}
    async with in_process(env, auth, allowed_hosts=["api.internal.example"]) as api:
        for host in ("evil.example", "127.0.0.1.evil.example", "api.internal.example.evil"):
            reply = await api.get("/v1/tasks/acme/none", headers=user | {"Host": host})
            assert reply.status_code == 421, (host, reply.text)
        for host in ("localhost:8091", "127.0.0.1", "[::1]:8091", "api.internal.example"):
            reply = await api.get("/v1/tasks/acme/none", headers=user | {"Host": host})
            assert reply.status_code == 404, (host, reply.text)


async def test_every_post_must_be_json_so_a_form_cannot_cancel(env: TaskEnv) -> None:
    """A form POST to /cancel (as a page on another site could send with the proxy's cookie) is
    refused with 415 in both modes, as is a POST with no body type; the task keeps running."""
    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    for auth, who in ((Authenticator("header"), {"X-Forwarded-User": "finance-lead"}), (
        Authenticator("token", TOKENS), bearer(LEAD))):  # fmt: skip
        async with in_process(env, auth) as api:
            form = await api.post(f"/v1/tasks/{handle.id}/cancel", data={"x": "1"}, headers=who)
            assert form.status_code == 415, form.text
            bare = await api.post(f"/v1/tasks/{handle.id}/cancel", headers=who)
            assert bare.status_code == 415, bare.text
    assert (await handle.describe()).status.name == "RUNNING"
    assert (await env.awaiting_approval(handle)).phase.value == "awaiting_approval"
    await env.cancel(handle)


async def test_a_task_of_another_tenant_answers_exactly_as_one_that_does_not_exist(env: TaskEnv) -> None:
    """globex asks about an id before acme's task has it and after: every route answers the same
    status and body; starting the same chosen id starts globex's own task (201), as a fresh id does."""
    auth = Authenticator("token", TOKENS)
    async with in_process(env, auth) as api:
        calls = [("GET", f"/{r}", None) for r in ("", "pending", "events", "stream")]
        calls += [("POST", "/decisions", {"request_id": "r", "version": "v", "decision": "approve"})]
        calls += [
            ("POST", f"/{r}", b) for r, b in (("input", {"text": "hi"}), ("cancel", {}), ("stream-token", {}))
        ]

        async def answers() -> list[tuple[int, str]]:
            replies = [
                await api.request(
                    m, f"/v1/tasks/acme/shared-1{p}".rstrip("/"), json=b, headers=bearer(GLOBEX)
                )
                for m, p, b in calls
            ]
            return [(r.status_code, r.text) for r in replies]

        fresh = await answers()
        assert {status for status, _ in fresh} == {404}
        spec = example_spec()
        started = await api.post(
            "/v1/tasks", json={"spec": spec, "task_id": "shared-1"}, headers=bearer(LEAD)
        )
        assert started.json() == {"task_id": "acme/shared-1", "started": True}
        assert await answers() == fresh

        spec["tenant"], spec["policy"]["default_approvers"] = "globex", ["globex-lead"]
        for chosen in ("shared-1", "never-used-1", "acme/shared-1"):
            theirs = await api.post(
                "/v1/tasks", json={"spec": spec, "task_id": chosen}, headers=bearer(GLOBEX)
            )
            assert (theirs.status_code, theirs.json()) == (
                201,
                {"task_id": f"globex/{chosen}", "started": True},
            )
    for task_id in ("acme/shared-1", "globex/shared-1", "globex/never-used-1", "globex/acme/shared-1"):
        await env.cancel(env.client.get_workflow_handle(task_id))
