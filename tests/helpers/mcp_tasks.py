"""Driving MCP tasks on a real worker: the env, approvals and decisions, and what the history says
about the ``mcp.call`` and ``agent.turn`` activities."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client
from temporalio.service import RPCError

from tests.helpers.support import TEST_AGENTS, DevServer, TaskEnv, make_config

AGENTS = [*TEST_AGENTS, "tests.helpers.mcp_agent:registrations"]


def mcp_env(client: Client, dev_server: DevServer, tmp_path: Path) -> TaskEnv:
    return TaskEnv(
        client=client, config=make_config(tmp_path / "data", agents=AGENTS), address=dev_server.address
    )


async def next_request(handle: Any, tool: str) -> Any:
    """The one pending request, which must be ``tool``'s. Queries fail while no worker polls (a
    killed one's replacement still starting): those are asked again."""
    deadline = time.monotonic() + 90
    while True:
        try:
            status = await handle.query(AgentTaskWorkflow.status)
        except RPCError:
            status = None
        if status is not None and status.pending:
            break
        assert status is None or not status.phase.terminal, f"the task ended: {status.reason}"
        assert time.monotonic() < deadline, f"no request became pending; last status: {status}"
        await asyncio.sleep(0.2)
    [request] = status.pending
    assert request.action.tool == tool
    return request


async def approve_next(env: TaskEnv, handle: Any, tool: str) -> dict[str, Any]:
    """Approve the one pending request, which must be ``tool``'s; its arguments."""
    request = await next_request(handle, tool)
    await env.approve(handle, principal="it-lead")
    return request.action.arguments


async def reject_next(handle: Any, tool: str, reason: str) -> None:
    """Reject the one pending request, which must be ``tool``'s, with ``reason``."""
    request = await next_request(handle, tool)
    outcome = await handle.execute_update(
        AgentTaskWorkflow.decide,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "reject",
            "principal": "it-lead",
            "reason": reason,
        },
    )
    assert outcome.accepted is True


def scheduled(history_json: str, activity: str) -> list[Any]:
    """The decoded inputs of every ``activity`` the history scheduled, in order."""
    inputs = []
    for event in json.loads(history_json)["events"]:
        attrs = event.get("activityTaskScheduledEventAttributes")
        if attrs and attrs["activityType"]["name"] == activity:
            [payload] = attrs["input"]["payloads"]
            inputs.append(json.loads(base64.b64decode(payload["data"])))
    return inputs


def attempts(history_json: str, activity: str) -> list[tuple[int, str | None]]:
    """For every ``activity`` the history ran, in order: the attempt it ended on (Temporal records
    only the last start) and the message of the attempt before it (``lastFailure``), if any."""
    events = json.loads(history_json)["events"]
    names = {
        event["eventId"]: attrs["activityType"]["name"]
        for event in events
        if (attrs := event.get("activityTaskScheduledEventAttributes"))
    }
    found = []
    for event in events:
        started = event.get("activityTaskStartedEventAttributes")
        if started and names[started["scheduledEventId"]] == activity:
            last = started.get("lastFailure")
            found.append((int(started.get("attempt", 1)), last["message"] if last else None))
    return found
