"""The web approval inbox (`agent-worker inbox --web`) against a real dev server and worker: an
approver signs in with a token in headless Chromium, sees the pending write with its arguments,
artifact and version, approves, and watches the task complete; a stranger sees nothing and a
forged decision is refused before it reaches the workflow; header mode, edits, bad tokens and
missing CSRF tokens are checked over plain HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from agent_worker.inbox import InboxConfigError, build_app, load_tokens, running_inbox
from agent_worker.inbox.auth import COOKIE
from agent_worker.inbox.pages import task_url
from agent_worker.schemas.approvals import DecisionKind
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.security.signing import new_private_key, public_key_text
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.helpers.browser import chromium, fetch, save_screenshot, wait_for
from tests.helpers.support import TaskEnv, example_spec

LEAD_TOKEN = "lead-0f3c9a7e51d2b8c4"
STRANGER_TOKEN = "mallory-7d1e2f9a0b3c"


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({LEAD_TOKEN: "finance-lead", STRANGER_TOKEN: "mallory"}))
    return path


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def session_cookie(reply_headers: dict[str, str]) -> str:
    match = re.search(rf"{COOKIE}=([^;]+)", reply_headers.get("set-cookie", ""))
    assert match, f"no session cookie in {reply_headers}"
    return f"{COOKIE}={match.group(1)}"


def http_sign_in(url: str, token: str, headers: dict[str, str] | None = None) -> Any:
    """Sign in over plain HTTP as a browser does: the login page (its pre-login cookie and the form's
    CSRF token), then the form with ``token``; the login POST's reply."""
    page = fetch(url + "/login")
    login_cookie = re.search(r"aw_inbox_login=([^;]+)", page.headers.get("set-cookie", ""))
    assert page.status == 200 and login_cookie, page.headers
    return fetch(
        url + "/login",
        form={"token": token, "csrf": csrf_of(page.body)},
        headers={"Cookie": f"aw_inbox_login={login_cookie.group(1)}", **(headers or {})},
    )


async def listed(app: Any, principal: str, task_id: str) -> None:
    """Wait until visibility lists the task for ``principal`` (it is eventually consistent)."""
    deadline = time.monotonic() + 20
    while task_id not in [e.task_id for e in await app.service.inbox(principal)]:
        assert time.monotonic() < deadline, f"visibility never listed {task_id} for {principal}"
        await asyncio.sleep(0.2)


async def decisions_sent(handle: Any) -> list[str]:
    """The signals and updates in the task's history (a decision that reached the workflow)."""
    kinds = {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    }
    return [
        EventType.Name(e.event_type) async for e in handle.fetch_history_events() if e.event_type in kinds
    ]


def sign_in(driver: Any, url: str, token: str) -> str:
    """Sign in through the login form; the inbox page's text."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/login")  # signing in replaces any earlier session cookie
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()
    wait_for(driver, "principal")  # only signed-in pages name the principal
    return driver.find_element(By.TAG_NAME, "main").text


def stranger_looks(driver: Any, url: str, task_id: str) -> dict[str, str]:
    """Mallory signs in, looks at the inbox and at the task's page directly."""
    from selenium.webdriver.common.by import By

    inbox_text = sign_in(driver, url, STRANGER_TOKEN)
    seen = {
        "inbox": inbox_text,
        "principal": driver.find_element(By.ID, "principal").text,
        "csrf": driver.find_element(By.NAME, "csrf").get_attribute("value"),
        "cookie": driver.get_cookie(COOKIE)["value"],
    }
    driver.get(url + task_url(task_id))
    seen["task_page"] = driver.find_element(By.TAG_NAME, "main").text
    return seen


def approver_approves(driver: Any, url: str, task_id: str, shots: Path) -> dict[str, Any]:
    """finance-lead signs in, reads the request, approves it, and follows the task to its end."""
    from selenium.webdriver.common.by import By

    sign_in(driver, url, LEAD_TOKEN)
    task = driver.find_element(By.ID, f"task-{task_id}")
    request = task.find_element(By.CSS_SELECTOR, "section.request")
    seen: dict[str, Any] = {
        "request_text": request.text,
        "version": request.find_element(By.CSS_SELECTOR, "code.version").text,
        "args": {
            row.find_element(By.TAG_NAME, "th").text: json.loads(row.find_element(By.TAG_NAME, "pre").text)
            for row in request.find_elements(By.CSS_SELECTOR, "table.args tr")
        },
        "artifact": request.find_element(By.CSS_SELECTOR, "pre.artifact").text,
    }
    save_screenshot(driver, shots, "inbox-pending.png")
    request.find_element(By.CSS_SELECTOR, "form.approve button").click()
    seen["outcome"] = wait_for(driver, "outcome").text
    driver.find_element(By.ID, "follow").click()
    # The task page refreshes itself until the task has closed, then shows its evidence.
    wait_for(driver, "evidence", within=60)
    seen["phase"] = driver.find_element(By.ID, "phase").text
    seen["task_page"] = driver.find_element(By.TAG_NAME, "main").text
    seen["screenshot"] = save_screenshot(driver, shots, "inbox-completed.png")
    return seen


async def test_an_approver_approves_in_the_browser_and_a_stranger_sees_and_decides_nothing(
    env: TaskEnv, tmp_path: Path, tokens_file: Path
) -> None:
    """In Chromium, mallory (a valid token, not an approver) sees no task and gets a 404 for its page,
    and her forged POSTs (her own session and CSRF token, the real request and version), well formed
    or not, are refused with 403 before any decision reaches the workflow; finance-lead then sees the
    write's arguments, the report artifact and the version, approves, and watches the task complete."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    app = build_app(
        env.client,
        auth="token",
        tokens=tokens_file,
        keys_dir=tmp_path / "keys",
        artifact_dir=env.config.artifact_dir,
    )
    driver = await asyncio.to_thread(chromium)
    try:
        async with running_inbox(app, "127.0.0.1:0") as url:
            await listed(app, "finance-lead", handle.id)
            stranger = await asyncio.to_thread(stranger_looks, driver, url, handle.id)
            assert stranger["principal"] == "mallory"
            assert "Nothing to approve" in stranger["inbox"] and handle.id not in stranger["inbox"]
            assert "404" in stranger["task_page"] and "submit_report" not in stranger["task_page"]

            # Her own session and CSRF token, the real request and version: a well-formed approval,
            # and a malformed edit (refused for who she is, not for what is wrong with it).
            forged, malformed = [
                await asyncio.to_thread(
                    fetch,
                    url + task_url(handle.id) + "/decide",
                    form={
                        "csrf": stranger["csrf"],
                        "request_id": request.request_id,
                        "version": request.version,
                        **fields,
                    },
                    headers={"Cookie": f"{COOKIE}={stranger['cookie']}"},
                )
                for fields in ({"decision": "approve"}, {"decision": "edit", "edited_args": "{not json"})
            ]
            assert forged.status == 403, forged.body
            assert "mallory" in forged.body and "may not decide" in forged.body
            assert malformed.status == 403 and "may not decide" in malformed.body, malformed.body
            status = await handle.query(AgentTaskWorkflow.status)
            assert status.phase is TaskPhase.AWAITING_APPROVAL and [r.request_id for r in status.pending] == [
                request.request_id
            ]
            assert status.ignored == [] and await decisions_sent(handle) == []

            seen = await asyncio.to_thread(approver_approves, driver, url, handle.id, tmp_path)
    finally:
        await asyncio.to_thread(driver.quit)

    assert "submit_report" in seen["request_text"] and "finance-lead" in seen["request_text"]
    assert seen["version"] == request.version
    assert seen["args"] == request.action.arguments and seen["args"]["total"] == "9633.99"
    assert seen["artifact"].startswith("# Sales report 2026-10") and "9633.99" in seen["artifact"]
    assert seen["outcome"] == "Decision accepted"
    assert seen["phase"] == "completed", seen["task_page"]
    assert "approve by finance-lead via update" in seen["task_page"]
    assert seen["screenshot"].stat().st_size > 10_000

    result: TaskResult = await asyncio.wait_for(handle.result(), 30)
    assert result.phase is TaskPhase.COMPLETED and env.business().count() == 1
    [approval] = result.evidence.approvals
    assert (approval.principal, approval.decision, approval.via) == (
        "finance-lead",
        DecisionKind.APPROVE,
        "update",
    )


async def test_header_mode_trusts_the_proxy_header_and_edits_send_only_changed_arguments(
    env: TaskEnv,
) -> None:
    """Behind a proxy: no header is a 401, another principal sees nothing, a POST without the
    session's CSRF token is refused, a stale version is refused by the workflow with its reason
    shown, and the approver's edit (one argument changed in the JSON
    textarea) is accepted and recorded with just that argument."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    app = build_app(env.client, auth="header", principal_header="X-Forwarded-User")
    async with running_inbox(app, "127.0.0.1:0") as url:
        await listed(app, "finance-lead", handle.id)
        anonymous = await asyncio.to_thread(fetch, url + "/")
        assert anonymous.status == 401 and "X-Forwarded-User" in anonymous.body

        stranger = await asyncio.to_thread(fetch, url + "/", headers={"X-Forwarded-User": "mallory"})
        assert stranger.status == 200 and handle.id not in stranger.body
        hidden = await asyncio.to_thread(
            fetch, url + task_url(handle.id), headers={"X-Forwarded-User": "mallory"}
        )
        assert hidden.status == 404 and request.version not in hidden.body

        lead = {"X-Forwarded-User": "finance-lead"}
        page = await asyncio.to_thread(fetch, url + "/", headers=lead)
        assert page.status == 200 and handle.id in page.body and request.version in page.body
        cookie = session_cookie(page.headers)
        assert "HttpOnly" in page.headers["set-cookie"] and "SameSite=Strict" in page.headers["set-cookie"]
        edited = {**request.action.arguments, "total": "9999.00"}
        form = {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "edit",
            "edited_args": json.dumps(edited),
        }
        decide = url + task_url(handle.id) + "/decide"
        no_csrf = await asyncio.to_thread(fetch, decide, form=form, headers={**lead, "Cookie": cookie})
        assert no_csrf.status == 403 and "CSRF" in no_csrf.body
        other_session = await asyncio.to_thread(
            fetch, decide, form={**form, "csrf": csrf_of(page.body)}, headers=lead
        )
        assert other_session.status == 403  # the token belongs to a session this request does not carry
        assert await decisions_sent(handle) == []

        stale = {**form, "decision": "approve", "version": "sha256:" + "0" * 64, "csrf": csrf_of(page.body)}
        del stale["edited_args"]
        refused = await asyncio.to_thread(fetch, decide, form=stale, headers={**lead, "Cookie": cookie})
        assert refused.status == 409 and "stale version" in refused.body, refused.body
        assert await decisions_sent(handle) == []

        accepted = await asyncio.to_thread(
            fetch, decide, form={**form, "csrf": csrf_of(page.body)}, headers={**lead, "Cookie": cookie}
        )
        assert accepted.status == 200 and "Decision accepted" in accepted.body, accepted.body

    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    [approval] = result.evidence.approvals
    assert approval.decision is DecisionKind.EDIT and approval.edited_args == {"total": "9999.00"}
    assert approval.principal == "finance-lead"


async def test_the_inbox_signs_when_the_policy_requires_signatures(env: TaskEnv, tmp_path: Path) -> None:
    """With `require_signatures`, the inbox signs with the signed-in principal's key from its keys
    directory and the workflow accepts the decision; without a key it refuses to send one."""
    keys = tmp_path / "keys"
    spec = example_spec()
    spec["policy"]["signers"] = {"finance-lead": public_key_text(new_private_key("finance-lead", keys))}
    spec["policy"]["require_signatures"] = True
    handle = await env.start(spec)
    [request] = (await env.awaiting_approval(handle)).pending
    lead = {"X-Forwarded-User": "finance-lead"}
    form = {"request_id": request.request_id, "version": request.version, "decision": "approve"}
    decide = task_url(handle.id) + "/decide"

    keyless = build_app(env.client, auth="header", keys_dir=tmp_path / "elsewhere")
    async with running_inbox(keyless, "127.0.0.1:0") as url:
        page = await asyncio.to_thread(fetch, url + task_url(handle.id), headers=lead)
        headers = {**lead, "Cookie": session_cookie(page.headers)}
        refused = await asyncio.to_thread(
            fetch, url + decide, form={**form, "csrf": csrf_of(page.body)}, headers=headers
        )
        assert refused.status == 409 and "no usable key" in refused.body
    assert await decisions_sent(handle) == []

    signing = build_app(env.client, auth="header", keys_dir=keys)
    async with running_inbox(signing, "127.0.0.1:0") as url:
        page = await asyncio.to_thread(fetch, url + task_url(handle.id), headers=lead)
        headers = {**lead, "Cookie": session_cookie(page.headers)}
        accepted = await asyncio.to_thread(
            fetch, url + decide, form={**form, "csrf": csrf_of(page.body)}, headers=headers
        )
        assert accepted.status == 200 and "Decision accepted" in accepted.body, accepted.body
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and result.evidence.approvals[0].principal == "finance-lead"


async def test_token_mode_refuses_bad_tokens_missing_sessions_and_logged_out_sessions(
    client: Client, tmp_path: Path, tokens_file: Path
) -> None:
    """A wrong token gets the login page again with 401 and no cookie; pages without a session (or
    with a made-up one) redirect to the login; a POST without one is a 401; a hashed token entry
    signs in; logging out needs the CSRF token and ends the session."""
    import hashlib

    hashed = tmp_path / "hashed.json"
    hashed.write_text(
        json.dumps({"sha256:" + hashlib.sha256(LEAD_TOKEN.encode()).hexdigest(): "finance-lead"})
    )
    for tokens in (tokens_file, hashed):
        app = build_app(client, auth="token", tokens=tokens)
        async with running_inbox(app, "127.0.0.1:0") as url:
            wrong = await asyncio.to_thread(http_sign_in, url, LEAD_TOKEN + "x")
            assert wrong.status == 401 and "not valid" in wrong.body and "set-cookie" not in wrong.headers
            for cookie in ({}, {"Cookie": f"{COOKIE}=made-up"}):
                page = await asyncio.to_thread(fetch, url + "/", headers=cookie)
                assert (page.status, page.headers.get("location")) == (303, "/login")
            post = await asyncio.to_thread(fetch, url + "/tasks/x/decide", form={"decision": "approve"})
            assert post.status == 401

            good = await asyncio.to_thread(http_sign_in, url, LEAD_TOKEN)
            assert good.status == 303 and "HttpOnly" in good.headers["set-cookie"]
            cookie = {"Cookie": session_cookie(good.headers)}
            page = await asyncio.to_thread(fetch, url + "/", headers=cookie)
            assert page.status == 200 and ">finance-lead<" in page.body
            assert (
                "script-src" not in page.headers["content-security-policy"]
            )  # default-src 'none': no script
            unknown = await asyncio.to_thread(fetch, url + task_url("no-such-task"), headers=cookie)
            assert unknown.status == 404 and "no-such-task" in unknown.body

            no_csrf = await asyncio.to_thread(fetch, url + "/logout", form={}, headers=cookie)
            assert no_csrf.status == 403
            out = await asyncio.to_thread(
                fetch, url + "/logout", form={"csrf": csrf_of(page.body)}, headers=cookie
            )
            assert out.status == 303
            after = await asyncio.to_thread(fetch, url + "/", headers=cookie)
            assert (after.status, after.headers.get("location")) == (303, "/login")


def test_unusable_token_settings_are_refused_naming_the_problem(tmp_path: Path) -> None:
    """A missing, malformed, short-token or empty tokens file, and token mode without one, are
    refused at start with a message that says what is wrong."""
    with pytest.raises(InboxConfigError, match="cannot read"):
        load_tokens(tmp_path / "absent.json")
    cases = {
        "{not json": "not valid JSON",
        "{}": "non-empty JSON object",
        '{"short": "finance-lead"}': "shorter than 16",
        '{"a-long-enough-token": ""}': "not a valid name",
        '{"sha256:abc": "finance-lead"}': "64 lowercase hex",
    }
    for text, problem in cases.items():
        path = tmp_path / "tokens.json"
        path.write_text(text)
        with pytest.raises(InboxConfigError, match=problem):
            load_tokens(path)
    with pytest.raises(InboxConfigError, match="--tokens"):
        build_app(None, auth="token")  # type: ignore[arg-type]
    with pytest.raises(InboxConfigError, match="unknown auth mode"):
        build_app(None, auth="cookie")  # type: ignore[arg-type]


def batch_seen(driver: Any, url: str, task_id: str) -> dict[str, Any]:
    """finance-lead signs in and reads the task's card: its prompt and the response's calls."""
    from selenium.webdriver.common.by import By

    sign_in(driver, url, LEAD_TOKEN)
    card = driver.find_element(By.ID, f"task-{task_id}")
    return {
        "prompt": card.find_element(By.CSS_SELECTOR, "p.prompt").text,
        "calls": {
            row.get_attribute("id"): [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in card.find_elements(By.CSS_SELECTOR, "table.batch tr[id]")
        },
        "request": card.find_element(By.CSS_SELECTOR, "section.request").text,
    }


async def test_the_inbox_shows_the_prompt_and_the_batchs_calls_with_their_results(
    env: TaskEnv, tmp_path: Path, tokens_file: Path
) -> None:
    """A response with two allowed commands and a gated write: in Chromium, the approver's card shows
    the task's prompt, all three calls, and the commands' results, beside the write's request."""
    handle = await env.start(
        {
            "agent": "batcher",
            "prompt": "batch of 2 sleeping 1",
            "policy": {"default_approvers": ["finance-lead"]},
        }
    )
    await env.wait_status(
        handle, lambda s: bool(s.pending) and sum(v.state == "executed" for v in s.batch) == 2, within=60
    )
    app = build_app(
        env.client,
        auth="token",
        tokens=tokens_file,
        keys_dir=tmp_path / "keys",
        artifact_dir=env.config.artifact_dir,
    )
    driver = await asyncio.to_thread(chromium)
    try:
        async with running_inbox(app, "127.0.0.1:0") as url:
            await listed(app, "finance-lead", handle.id)
            seen = await asyncio.to_thread(batch_seen, driver, url, handle.id)
    finally:
        await asyncio.to_thread(driver.quit)
    await env.approve(handle)
    assert (await asyncio.wait_for(handle.result(), 30)).phase is TaskPhase.COMPLETED
    assert "batch of 2 sleeping 1" in seen["prompt"]
    calls = seen["calls"]
    assert set(calls) == {"call-call_cmd_0", "call-call_cmd_1", "call-call_write"}
    for i in range(2):
        tool, verdict, state, output = calls[f"call-call_cmd_{i}"]
        assert (tool, verdict, state) == ("run_shell", "allow", "executed")
        assert '"exit_code": 0' in output
    assert calls["call-call_write"][:3] == ["record_value", "require_approval", "waiting"]
    assert "record_value" in seen["request"]
