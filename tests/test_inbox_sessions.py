"""The inbox's sign-in and sessions against a real dev server: a page on another site cannot sign a
browser in (login CSRF, in headless Chromium and over plain HTTP), header mode keeps no server state
for cookie-less requests, and token mode's session table is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_worker.inbox import build_app, running_inbox
from agent_worker.inbox.auth import COOKIE, Authenticator
from temporalio.client import Client

from tests.helpers.browser import chromium, fetch
from tests.test_inbox_web import STRANGER_TOKEN, csrf_of, http_sign_in, session_cookie, tokens_file

__all__ = ["tokens_file"]  # the fixture, shared with test_inbox_web


@contextlib.contextmanager
def attacker_site(html: str) -> Iterator[str]:
    """Serve ``html`` at ``http://localhost:<port>/``: another site than the inbox's 127.0.0.1."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            data = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def attacked_browser(inbox_url: str, attack_url: str) -> dict[str, str]:
    """The victim's browser opens the inbox's login page, then visits the attacker's page (which posts
    mallory's token to the inbox's login by itself), then opens the inbox."""
    from selenium.webdriver.common.by import By

    driver = chromium()
    try:
        driver.get(inbox_url + "/login")  # the victim's own pre-login cookie is in the browser
        driver.get(attack_url)
        with contextlib.suppress(Exception):
            # The auto-submitted form lands on the inbox's origin, whatever it answers.
            from selenium.webdriver.support.ui import WebDriverWait

            WebDriverWait(driver, 15).until(lambda d: d.current_url.startswith(inbox_url))
        landed = driver.find_element(By.TAG_NAME, "body").text
        driver.get(inbox_url + "/")
        return {
            "landed": landed,
            "url": driver.current_url,
            "page": driver.find_element(By.TAG_NAME, "body").text,
        }
    finally:
        driver.quit()


async def test_a_page_on_another_site_cannot_sign_a_browser_in_as_the_attackers_principal(
    client: Client, tokens_file: Path
) -> None:
    """Mallory's page (on localhost, another site than the inbox on 127.0.0.1) auto-submits her token
    with a CSRF token she fetched for herself to the inbox's login in the victim's Chromium: the inbox
    refuses it, keeps no session, and the victim's next visit goes to the login page, not to an inbox
    signed in as mallory."""
    app = build_app(client, auth="token", tokens=tokens_file)
    async with running_inbox(app, "127.0.0.1:0") as url:
        own = await asyncio.to_thread(fetch, url + "/login")  # mallory's own login page and token
        found = re.search(r'name="csrf" value="([^"]*)"', own.body)
        own_csrf = found.group(1) if found else ""
        html = (
            f'<html><body><form id="f" method="post" action="{url}/login">'
            f'<input name="token" value="{STRANGER_TOKEN}"><input name="csrf" value="{own_csrf}">'
            '</form><script>document.getElementById("f").submit()</script></body></html>'
        )
        with attacker_site(html) as attack_url:
            seen = await asyncio.to_thread(attacked_browser, url, attack_url)
        assert seen["url"] == url + "/login", seen
        assert "mallory" not in seen["page"] and "Sign in" in seen["page"]
        assert "another site" in seen["landed"] or "not sent from this page" in seen["landed"], seen
        assert app.auth.session_count == 0


async def test_a_login_post_needs_its_pre_login_cookie_and_token_and_no_cross_site_mark(
    client: Client, tokens_file: Path
) -> None:
    """A login POST with a valid principal token is refused (403, no session cookie, no session) when
    it lacks the pre-login cookie, carries a CSRF token made for another browser's cookie, or is marked
    `Sec-Fetch-Site: cross-site` by the browser; the same POST from the inbox's own page signs in."""
    app = build_app(client, auth="token", tokens=tokens_file)
    async with running_inbox(app, "127.0.0.1:0") as url:
        victim = await asyncio.to_thread(fetch, url + "/login")
        victim_cookie = re.search(r"aw_inbox_login=([^;]+)", victim.headers["set-cookie"])
        assert victim_cookie and "SameSite=Strict" in victim.headers["set-cookie"]
        attacker = await asyncio.to_thread(fetch, url + "/login")
        assert csrf_of(attacker.body) != csrf_of(victim.body)
        cookie = {"Cookie": f"aw_inbox_login={victim_cookie.group(1)}"}
        attempts = {
            "no cookie, no token": ({"token": STRANGER_TOKEN}, {}),
            "no cookie": ({"token": STRANGER_TOKEN, "csrf": csrf_of(attacker.body)}, {}),
            "another browser's token": ({"token": STRANGER_TOKEN, "csrf": csrf_of(attacker.body)}, cookie),
            "cross-site": (
                {"token": STRANGER_TOKEN, "csrf": csrf_of(victim.body)},
                {**cookie, "Sec-Fetch-Site": "cross-site"},
            ),
        }
        for name, (form, headers) in attempts.items():
            refused = await asyncio.to_thread(fetch, url + "/login", form=form, headers=headers)
            assert refused.status == 403, (name, refused.status)
            assert COOKIE not in refused.headers.get("set-cookie", ""), name
        assert app.auth.session_count == 0

        signed_in = await asyncio.to_thread(
            http_sign_in, url, STRANGER_TOKEN, {"Sec-Fetch-Site": "same-origin"}
        )
        assert signed_in.status == 303 and app.auth.session_count == 1
        page = await asyncio.to_thread(
            fetch, url + "/", headers={"Cookie": session_cookie(signed_in.headers)}
        )
        assert page.status == 200 and ">mallory<" in page.body


async def test_header_mode_keeps_no_session_for_cookie_less_requests_and_binds_csrf_to_cookie_and_principal(
    client: Client,
) -> None:
    """Fifty cookie-less requests through the proxy leave no session on the server (each gets a fresh
    cookie); a form token works only with the cookie it was made for and for the principal it was
    made for, and a cross-site POST is refused even with both."""
    app = build_app(client, auth="header")
    lead, mallory = {"X-Forwarded-User": "finance-lead"}, {"X-Forwarded-User": "mallory"}
    async with running_inbox(app, "127.0.0.1:0") as url:
        pages = [await asyncio.to_thread(fetch, url + "/", headers=lead) for _ in range(50)]
        assert {p.status for p in pages} == {200}
        assert app.auth.session_count == 0
        assert len({session_cookie(p.headers) for p in pages}) == 50
        first, second = pages[0], pages[1]
        logout = url + "/logout"
        mine = {**lead, "Cookie": session_cookie(first.headers)}
        wrong_cookie = {**lead, "Cookie": session_cookie(second.headers)}
        other_principal = {**mallory, "Cookie": session_cookie(first.headers)}
        for headers in (wrong_cookie, other_principal, {**mine, "Sec-Fetch-Site": "cross-site"}):
            refused = await asyncio.to_thread(
                fetch, logout, form={"csrf": csrf_of(first.body)}, headers=headers
            )
            assert refused.status == 403, headers
        again = await asyncio.to_thread(fetch, url + "/", headers=mine)
        assert "set-cookie" not in again.headers and csrf_of(again.body) == csrf_of(first.body)
        out = await asyncio.to_thread(fetch, logout, form={"csrf": csrf_of(first.body)}, headers=mine)
        assert out.status == 303
        assert app.auth.session_count == 0


def test_token_mode_keeps_a_bounded_session_table_dropping_the_least_recently_used() -> None:
    """With room for three sessions, a fourth and fifth sign-in push out the least recently used
    ones, and a session used in between stays."""
    auth = Authenticator("token", tokens={"a-long-enough-token-1": "finance-lead"}, max_sessions=3)
    first, second, third = (auth.new_session("finance-lead") for _ in range(3))
    assert auth.session(first.session_id) is first  # used again: now the most recent
    auth.new_session("finance-lead")
    auth.new_session("finance-lead")
    assert auth.session_count == 3
    assert auth.session(second.session_id) is None and auth.session(third.session_id) is None
    assert auth.session(first.session_id) is first
