"""The web inbox's login against token guessing: wrong tokens are limited per client address and in
all, answered 429 with Retry-After (a right token too, while the limit holds), and the limit lifts
as the failures age out of the window. Driven over the inbox's ASGI app, each client with its own
address, on a test clock."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from agent_worker.inbox import build_app
from agent_worker.inbox.auth import (
    COOKIE,
    LOGIN_WINDOW_SECONDS,
    MAX_FAILED_LOGINS,
    MAX_FAILED_LOGINS_PER_CLIENT,
    LoginThrottle,
)
from temporalio.client import Client

LEAD_TOKEN = "lead-0f3c9a7e51d2b8c4"


class Browser:
    """One client address signing in as a browser does: the login page (its pre-login cookie and
    CSRF token), then the form."""

    def __init__(self, app: object, address: str) -> None:
        transport = httpx.ASGITransport(app=app, client=(address, 40000))  # type: ignore[arg-type]
        self.http = httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8090")

    async def sign_in(self, token: str) -> httpx.Response:
        page = await self.http.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert page.status_code == 200 and csrf, page.text
        return await self.http.post("/login", data={"token": token, "csrf": csrf.group(1)})


async def test_wrong_tokens_are_limited_per_client_and_in_all(client: Client, tmp_path: Path) -> None:
    """Of 50 wrong tokens from one address, the first 10 get 401 and the rest 429 with Retry-After;
    its right token is refused too until the window has passed, while another address signs in; when
    many addresses together have failed 100 times, a new address waits as well."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({LEAD_TOKEN: "finance-lead"}))
    app = build_app(client, tokens=tokens)
    now = [1000.0]
    app.throttle = LoginThrottle(clock=lambda: now[0])

    guesser = Browser(app, "203.0.113.7")
    replies = [await guesser.sign_in(f"guess-{n:04d}-0123456789") for n in range(50)]
    statuses = [r.status_code for r in replies]
    assert statuses == [401] * MAX_FAILED_LOGINS_PER_CLIENT + [429] * (50 - MAX_FAILED_LOGINS_PER_CLIENT)
    throttled = replies[-1]
    assert 0 < int(throttled.headers["retry-after"]) <= LOGIN_WINDOW_SECONDS
    assert "Too many failed sign-ins" in throttled.text and COOKIE not in throttled.headers.get(
        "set-cookie", ""
    )
    right = await guesser.sign_in(LEAD_TOKEN)
    assert right.status_code == 429 and COOKIE not in right.headers.get("set-cookie", "")

    other = await Browser(app, "198.51.100.20").sign_in(LEAD_TOKEN)
    assert other.status_code == 303 and COOKIE in other.headers["set-cookie"]  # only that address waits

    now[0] += LOGIN_WINDOW_SECONDS + 1
    right = await guesser.sign_in(LEAD_TOKEN)
    assert right.status_code == 303 and COOKIE in right.headers["set-cookie"]

    # Many addresses, each under its own limit, together reach the global one.
    per_address = MAX_FAILED_LOGINS_PER_CLIENT - 1
    for n in range(MAX_FAILED_LOGINS // per_address + 1):
        crowd = Browser(app, f"192.0.2.{n + 1}")
        for _ in range(per_address):
            assert (await crowd.sign_in("wrong-token-0123456789")).status_code in (401, 429)
    newcomer = Browser(app, "198.51.100.99")
    waiting = await newcomer.sign_in(LEAD_TOKEN)
    assert waiting.status_code == 429 and int(waiting.headers["retry-after"]) > 0
    now[0] += LOGIN_WINDOW_SECONDS + 1
    assert (await newcomer.sign_in(LEAD_TOKEN)).status_code == 303


def test_the_throttle_keeps_a_bounded_memory() -> None:
    """A guesser cycling through addresses leaves at most MAX_THROTTLED_CLIENTS of them (and
    MAX_FAILED_LOGINS failures in all) in memory."""
    from agent_worker.inbox.auth import MAX_THROTTLED_CLIENTS

    throttle = LoginThrottle(clock=lambda: 0.0)
    for n in range(MAX_THROTTLED_CLIENTS + 500):
        throttle.failed(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}")
    assert len(throttle._clients) == MAX_THROTTLED_CLIENTS
    assert len(throttle._all) == MAX_FAILED_LOGINS
