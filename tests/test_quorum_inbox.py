"""A quorum's progress where people look, against the dev server and a worker: over the HTTP API the
starter (set from the caller) is refused, one approval leaves the request pending with its progress
in the task and its pending requests, and in headless Chromium the inbox shows that progress to the
next approver (with no edit control: a quorum approves one version), whose approval executes the
write once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox import build_app, running_inbox
from agent_worker.inbox.auth import Authenticator
from agent_worker.schemas.tasks import TaskPhase, TaskResult

from tests.helpers.browser import chromium, save_screenshot, wait_for
from tests.helpers.support import TaskEnv
from tests.test_inbox_web import listed, sign_in
from tests.test_quorum import quorum_spec

TOKENS = {"alice-5e1d0c2b9a87": "alice", "bob-3f8e7d6c5b4a": "bob", "carol-9a8b7c6d5e4f": "carol"}
BY_NAME = {name: token for token, name in TOKENS.items()}


@pytest.fixture
async def api(env: TaskEnv) -> AsyncIterator[httpx.AsyncClient]:
    app = build_api(env.client, ApiConfig(auth=Authenticator("token", TOKENS), task_queue=env.task_queue))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as client:
        yield client


def as_(principal: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {BY_NAME[principal]}"}


async def pending(api: httpx.AsyncClient, task_id: str, principal: str) -> list[dict[str, Any]]:
    """The task's pending requests ``principal`` may decide, once there are some."""
    for _ in range(600):
        reply = await api.get(f"/v1/tasks/{task_id}/pending", headers=as_(principal))
        if reply.status_code == 200 and reply.json():
            return reply.json()
        await asyncio.sleep(0.1)
    raise AssertionError(f"{task_id} never had a request pending for {principal}")


async def decide(api: httpx.AsyncClient, task_id: str, principal: str) -> dict[str, Any]:
    [request] = await pending(api, task_id, principal)
    body = {"request_id": request["request_id"], "version": request["version"], "decision": "approve"}
    reply = await api.post(f"/v1/tasks/{task_id}/decisions", json=body, headers=as_(principal))
    assert reply.status_code == 200, reply.text
    return reply.json()


def carol_approves(driver: Any, url: str, task_id: str, shots: Path) -> dict[str, str]:
    """carol signs in, reads the request's quorum progress, approves, and follows the task."""
    from selenium.webdriver.common.by import By

    sign_in(driver, url, BY_NAME["carol"])
    request = driver.find_element(By.ID, f"task-{task_id}").find_element(By.CSS_SELECTOR, "section.request")
    seen = {
        "quorum": request.find_element(By.CSS_SELECTOR, "dd.quorum").text,
        "edit_forms": str(len(request.find_elements(By.CSS_SELECTOR, "form.edit"))),
    }
    save_screenshot(driver, shots, "inbox-quorum-pending.png")
    request.find_element(By.CSS_SELECTOR, "form.approve button").click()
    seen["outcome"] = wait_for(driver, "outcome").text
    seen["outcome_page"] = driver.find_element(By.TAG_NAME, "main").text
    driver.find_element(By.ID, "follow").click()
    wait_for(driver, "evidence", within=60)
    seen["phase"] = driver.find_element(By.ID, "phase").text
    return seen


async def test_quorum_progress_shows_in_the_api_and_the_inbox_and_the_second_approval_writes_once(
    env: TaskEnv, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Over the API a spec naming another starter is refused (403) and one whose quorum the caller's
    exclusion puts out of reach is invalid (422); alice starts the task (the API records her as its
    starter); her approval is refused
    naming separation of duties; bob's is accepted with '1 of 2 approvals: bob' and the task, read
    over the API, still waits with that progress and nothing written; in Chromium carol sees the
    progress in her inbox, approves, and the task completes with one write."""
    spec = quorum_spec()
    reply = await api.post("/v1/tasks", json={"spec": spec}, headers=as_("bob"))
    assert reply.status_code == 403 and "started_by must be the caller, 'bob'" in reply.text
    out_of_reach = quorum_spec(approvers=["alice", "bob"])
    del out_of_reach["started_by"]
    reply = await api.post("/v1/tasks", json={"spec": out_of_reach}, headers=as_("bob"))
    assert reply.status_code == 422 and "the starter 'bob' does not count" in reply.text
    del spec["started_by"]  # the API sets it to the caller
    reply = await api.post("/v1/tasks", json={"spec": spec, "task_id": "quorum-1"}, headers=as_("alice"))
    assert reply.status_code == 201, reply.text
    task_id = reply.json()["task_id"]

    [request] = await pending(api, task_id, "alice")
    assert request["progress"] == "0 of 2 approvals" and request["quorum"] == {"required": 2, "veto": True}
    starter = await decide(api, task_id, "alice")
    assert starter["accepted"] is False and "separation of duties" in starter["detail"], starter
    assert (await decide(api, task_id, "bob"))[
        "detail"
    ] == "approve recorded: 1 of 2 approvals: bob (pending)"

    view = (await api.get(f"/v1/tasks/{task_id}", headers=as_("bob"))).json()
    assert view["status"]["phase"] == TaskPhase.AWAITING_APPROVAL.value
    [waiting] = view["status"]["pending"]
    assert waiting["progress"] == "1 of 2 approvals: bob" and [v["principal"] for v in waiting["votes"]] == [
        "bob"
    ]
    assert env.business().count() == 0

    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    app = build_app(env.client, auth="token", tokens=tokens, keys_dir=tmp_path / "keys")
    driver = await asyncio.to_thread(chromium)
    try:
        async with running_inbox(app, "127.0.0.1:0") as url:
            await listed(app, "carol", task_id)
            seen = await asyncio.to_thread(carol_approves, driver, url, task_id, tmp_path)
    finally:
        await asyncio.to_thread(driver.quit)
    assert seen["quorum"] == "1 of 2 approvals: bob" and seen["edit_forms"] == "0"
    assert seen["outcome"] == "Decision accepted", seen["outcome_page"]
    assert seen["phase"] == "completed"

    handle = env.client.get_workflow_handle(task_id, result_type=TaskResult)
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.phase is TaskPhase.COMPLETED and env.business().count() == 1
    [approval] = result.evidence.approvals
    assert [(v.principal, v.via) for v in approval.votes] == [("bob", "update"), ("carol", "update")]
