"""Remembered grants over the HTTP API, against the dev server: an approver approves and remembers
through `POST .../decisions`, lists the grant and revokes it (`/v1/grants`); a principal of another
tenant neither sees nor revokes it; a principal the request does not name cannot make one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from agent_worker.activities.stores.state import build_grant_store
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox.auth import Authenticator
from agent_worker.schemas.tasks import TaskPhase, TaskResult

from tests.helpers.support import TaskEnv

LEAD = "lead-4b1e8c2d7f90a3e5"
STRANGER = "mallory-2c9d4e7f1a0b"
OTHER_TENANT = "globex-lead-8e7d6c5b4a"
SPEC: dict[str, Any] = {
    "agent": "recorder",
    "tenant": "acme",
    "prompt": "record: 50",
    "policy": {"default_approvers": ["finance-lead"], "grants": {"max_seconds": 86400}},
}


@pytest.fixture
async def api(env: TaskEnv) -> AsyncIterator[httpx.AsyncClient]:
    auth = Authenticator("token", {LEAD: "finance-lead", STRANGER: "mallory", OTHER_TENANT: "globex-lead"})
    config = ApiConfig(
        auth=auth,
        task_queue=env.task_queue,
        tenants={"finance-lead": ["acme"], "mallory": ["acme"], "globex-lead": ["globex"]},
        grants=build_grant_store(env.config),
    )
    transport = httpx.ASGITransport(app=build_api(env.client, config))
    async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def pending(api: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """The task's one pending request, once there is one."""
    for _ in range(600):
        reply = await api.get(f"/v1/tasks/{task_id}/pending", headers=bearer(LEAD))
        assert reply.status_code == 200, reply.text
        if reply.json():
            [request] = reply.json()
            return request
        await asyncio.sleep(0.1)
    raise AssertionError("no request became pending")


async def test_an_approver_remembers_lists_and_revokes_a_grant_over_the_api(
    api: httpx.AsyncClient, env: TaskEnv
) -> None:
    """Approve-and-remember over the API makes a grant the approver lists (until a day from now, as
    the policy caps); the next write needs nobody; another tenant's principal gets 404 for it; the
    approver's revoke answers the revoked grant (then 409), and the next write asks again."""
    first = await env.start(SPEC)
    request = await pending(api, first.id)
    decided = await api.post(
        f"/v1/tasks/{first.id}/decisions",
        json={
            "request_id": request["request_id"],
            "version": request["version"],
            "decision": "approve",
            "remember": {"when": "int(args.value) < 100", "until": "2099-01-01T00:00:00Z"},
        },
        headers=bearer(LEAD),
    )
    # The policy caps grants at a day: a remember until 2099 is refused, naming the cap.
    assert decided.status_code == 200 and decided.json()["accepted"] is False
    assert "at most 86400 s" in decided.json()["detail"]
    decided = await api.post(
        f"/v1/tasks/{first.id}/decisions",
        json={
            "request_id": request["request_id"],
            "version": request["version"],
            "decision": "approve",
            "remember": {"when": "int(args.value) < 100"},
        },
        headers=bearer(LEAD),
    )
    assert decided.status_code == 200 and decided.json()["accepted"] is False  # no until: refused too
    until = (datetime.now(UTC) + timedelta(hours=12)).isoformat()
    decided = await api.post(
        f"/v1/tasks/{first.id}/decisions",
        json={
            "request_id": request["request_id"],
            "version": request["version"],
            "decision": "approve",
            "remember": {"when": "int(args.value) < 100", "until": until},
        },
        headers=bearer(LEAD),
    )
    assert decided.status_code == 200 and decided.json()["accepted"] is True, decided.text
    result: TaskResult = await asyncio.wait_for(first.result(), 60)
    grant_id = result.evidence.approvals[0].remembered_as
    assert grant_id is not None

    listed = await api.get("/v1/grants", headers=bearer(LEAD))
    assert listed.status_code == 200
    [grant] = listed.json()
    assert grant["grant_id"] == grant_id and grant["principal"] == "finance-lead"
    assert datetime.fromisoformat(grant["remember"]["until"]) == datetime.fromisoformat(until)
    assert grant["status"] == "active"
    assert (await api.get("/v1/grants", headers=bearer(OTHER_TENANT))).json() == []
    refused = await api.post(f"/v1/grants/{grant_id}/revoke", json={}, headers=bearer(OTHER_TENANT))
    assert refused.status_code == 404

    second = await env.start(SPEC)
    assert (await asyncio.wait_for(second.result(), 60)).evidence.approvals[0].grant_id == grant_id

    revoked = await api.post(f"/v1/grants/{grant_id}/revoke", json={"reason": "audit"}, headers=bearer(LEAD))
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["status"] == "revoked" and revoked.json()["status_by"] == "finance-lead"
    again = await api.post(f"/v1/grants/{grant_id}/revoke", json={}, headers=bearer(LEAD))
    assert again.status_code == 409
    assert (await api.get("/v1/grants", headers=bearer(LEAD))).json() == []
    assert [g["status"] for g in (await api.get("/v1/grants?ended=true", headers=bearer(LEAD))).json()] == [
        "revoked"
    ]

    third = await env.start(SPEC)
    await pending(api, third.id)  # asks again
    await env.approve(third)
    assert (await asyncio.wait_for(third.result(), 60)).phase is TaskPhase.COMPLETED


async def test_a_principal_the_request_does_not_name_cannot_make_a_grant_over_the_api(
    api: httpx.AsyncClient, env: TaskEnv
) -> None:
    """mallory (in the tenant, not an approver) is refused before anything reaches the task; no
    grant exists after."""
    handle = await env.start(SPEC)
    request = await pending(api, handle.id)
    refused = await api.post(
        f"/v1/tasks/{handle.id}/decisions",
        json={
            "request_id": request["request_id"],
            "version": request["version"],
            "decision": "approve",
            "remember": {"scope": "tenant"},
        },
        headers=bearer(STRANGER),
    )
    assert refused.status_code in (403, 404), refused.text
    assert build_grant_store(env.config).listed(ended=True) == []
    await env.approve(handle)
    await asyncio.wait_for(handle.result(), 60)
