"""The HTTP API (`agent-worker api`) against a real dev server and worker, through plain httpx: a task
runs from start to completion over HTTP; its event stream (Server-Sent Events) is whole and resumes
with `Last-Event-ID` with no gap and no repeat; every route refuses a stranger and a principal of
another tenant before anything reaches the task's history; the OpenAPI document validates."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from agent_worker.activities.events import JsonlEventSink
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox.auth import Authenticator
from openapi_spec_validator import validate
from temporalio.api.enums.v1 import EventType

from tests.helpers.support import TaskEnv, example_spec

LEAD = "lead-0f3c9a7e51d2b8c4"
STRANGER = "mallory-7d1e2f9a0b3c"
OTHER_TENANT = "globex-lead-5a6b7c8d9e"


@pytest.fixture
async def api(env: TaskEnv) -> AsyncIterator[httpx.AsyncClient]:
    auth = Authenticator("token", {LEAD: "finance-lead", STRANGER: "mallory", OTHER_TENANT: "globex-lead"})
    config = ApiConfig(
        auth=auth,
        task_queue=env.task_queue,
        tenants={"finance-lead": ["acme"], "mallory": ["acme"], "globex-lead": ["globex"]},
        stored_events=JsonlEventSink(env.config.events_dir).read_chain,
    )
    app = build_api(env.client, config)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def sse(
    api: httpx.AsyncClient, task_id: str, last_id: int | None = None
) -> list[tuple[str, int | None]]:
    """Read the task's event stream to its end: (event type, id) per frame."""
    headers = bearer(LEAD) | ({"Last-Event-ID": str(last_id)} if last_id is not None else {})
    frames: list[tuple[str, int | None]] = []
    async with api.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        kind, ident = "", None
        async for line in reply.aiter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("id: "):
                ident = int(line[4:])
            elif line == "" and kind:
                frames.append((kind, ident))
                kind, ident = "", None
    return frames


async def decisions_in_history(env: TaskEnv, task_id: str) -> int:
    kinds = {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    }
    handle = env.client.get_workflow_handle(task_id)
    return len([e async for e in handle.fetch_history_events() if e.event_type in kinds])


async def pending_requests(api: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        reply = await api.get(f"/v1/tasks/{task_id}/pending", headers=bearer(LEAD))
        assert reply.status_code == 200, reply.text
        if reply.json():
            return reply.json()
        assert time.monotonic() < deadline, "no request became pending"
        await asyncio.sleep(0.2)


async def test_plain_httpx_runs_a_task_from_start_to_completion_and_follows_its_events(
    api: httpx.AsyncClient, env: TaskEnv
) -> None:
    """Start (201, then 200 for the same id, both naming it within its tenant), the pending request,
    an approval, the closed task's result; the event stream from the start is whole and ends with
    the task; resumed after an event, it gives exactly the later ones."""
    spec = example_spec()
    reply = await api.post("/v1/tasks", json={"spec": spec, "task_id": "api-report-1"}, headers=bearer(LEAD))
    assert reply.status_code == 201, reply.text
    assert reply.json() == {"task_id": "acme/api-report-1", "started": True}  # scoped to its tenant
    again = await api.post("/v1/tasks", json={"spec": spec, "task_id": "api-report-1"}, headers=bearer(LEAD))
    assert again.status_code == 200 and again.json() == {"task_id": "acme/api-report-1", "started": False}

    following = asyncio.create_task(sse(api, "acme/api-report-1"))
    [request] = await pending_requests(api, "acme/api-report-1")
    decided = await api.post(
        "/v1/tasks/acme/api-report-1/decisions",
        json={"request_id": request["request_id"], "version": request["version"], "decision": "approve"},
        headers=bearer(LEAD),
    )
    assert decided.status_code == 200 and decided.json()["accepted"] is True, decided.text
    frames = await asyncio.wait_for(following, 90)

    read = await api.get("/v1/tasks/acme/api-report-1", headers=bearer(LEAD))
    assert read.status_code == 200
    assert read.json()["running"] is False and read.json()["result"]["phase"] == "completed"

    ids = [ident for kind, ident in frames if ident is not None]
    assert [k for k, _ in frames if k == "gap"] == []
    assert ids == list(range(1, len(ids) + 1)), ids  # every event once, in order, none missing
    assert frames[-1][0] == "end" and "task.finished" in [k for k, _ in frames]
    resumed = await sse(api, "acme/api-report-1", last_id=ids[len(ids) // 2])
    assert [i for _, i in resumed if i is not None] == ids[len(ids) // 2 + 1 :]


async def test_every_route_refuses_strangers_and_other_tenants_before_the_task_hears_of_it(
    api: httpx.AsyncClient, env: TaskEnv
) -> None:
    """No token: 401. A valid principal the policy does not name, or one of another tenant: 404 on
    every read (as for a task that does not exist), 403 or 404 on every write; no decision reaches the
    task's history, and starting a task for a tenant one may not act in is refused."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    task = handle.id
    assert (await api.get(f"/v1/tasks/{task}")).status_code == 401
    assert (await api.get(f"/v1/tasks/{task}", headers=bearer("not-a-token-at-all-x"))).status_code == 401
    decision = {"request_id": request.request_id, "version": request.version, "decision": "approve"}
    for token in (STRANGER, OTHER_TENANT):
        who = bearer(token)
        assert (await api.get(f"/v1/tasks/{task}", headers=who)).status_code == 404
        assert (await api.get(f"/v1/tasks/{task}/pending", headers=who)).status_code == 404
        assert (await api.get(f"/v1/tasks/{task}/events", headers=who)).status_code == 404
        for path, body in (("decisions", decision), ("input", {"text": "hi"}), ("cancel", {})):
            reply = await api.post(f"/v1/tasks/{task}/{path}", json=body, headers=who)
            assert reply.status_code in (403, 404), (token, path, reply.status_code, reply.text)
    assert await decisions_in_history(env, task) == 0
    assert (await handle.describe()).status.name == "RUNNING"

    spec = example_spec()
    refused = await api.post("/v1/tasks", json={"spec": spec}, headers=bearer(OTHER_TENANT))
    assert refused.status_code == 403 and "does not name" in refused.json()["detail"]
    spec["policy"]["default_approvers"] = ["globex-lead"]
    refused = await api.post("/v1/tasks", json={"spec": spec}, headers=bearer(OTHER_TENANT))
    assert refused.status_code == 403 and "tenant 'acme'" in refused.json()["detail"]
    cross = await api.post(
        f"/v1/tasks/{task}/decisions", json=decision, headers=bearer(LEAD) | {"Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status_code == 403
    assert await decisions_in_history(env, task) == 0
    await env.cancel(handle)


async def test_the_openapi_document_validates_and_names_every_route(api: httpx.AsyncClient) -> None:
    """`/openapi.json` is a valid OpenAPI document with each route of the API, its bearer scheme and
    the stream token parameter of the event streams."""
    reply = await api.get("/openapi.json")
    document = reply.json()
    validate(document)
    assert {
        "/v1/tasks",
        "/v1/tasks/{task_id}",
        "/v1/tasks/{task_id}/pending",
        "/v1/tasks/{task_id}/decisions",
        "/v1/tasks/{task_id}/input",
        "/v1/tasks/{task_id}/cancel",
        "/v1/tasks/{task_id}/events",
        "/v1/tasks/{task_id}/stream",
        "/v1/tasks/{task_id}/stream-token",
    } <= set(document["paths"])
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    events = document["paths"]["/v1/tasks/{task_id}/events"]["get"]
    assert "access_token" in [p["name"] for p in events["parameters"]]
    assert json.dumps(document)
