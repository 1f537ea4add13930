"""One decision, few round trips (issue 43, acceptance 1): a decision over the HTTP API, through the
inbox's form, and by the CLI each costs at most two Temporal calls (one read, the update), counted
by a client interceptor on the very client the API and the CLI use; none reads history or describes
the task (the update's validator makes those reads redundant)."""

from __future__ import annotations

import argparse
from typing import Any

import httpx
from agent_worker.api import ApiConfig, build_api
from agent_worker.cli.context import CliContext
from agent_worker.cli.main import build_parser
from agent_worker.cli.tasks import cmd_decide
from agent_worker.inbox.auth import Authenticator
from agent_worker.inbox.service import InboxService

from agent_worker.client import AgentWorkerClient
from tests.helpers.rpc_count import CountedClient
from tests.helpers.support import TaskEnv, example_spec

LEAD = "lead-0f3c9a7e51d2b8c4"
MAX_CALLS_PER_DECISION = 2
READS_MADE_REDUNDANT = {"describe_workflow", "get_workflow_execution_history", "describe_workflow_execution"}


class CountedContext(CliContext):
    """The CLI's context, speaking through the counted client."""

    counted: CountedClient

    async def tasks(self, task_queue: str = "", address: str | None = None) -> AgentWorkerClient:
        return AgentWorkerClient(self.counted.client, task_queue or self.config.task_queue)


def assert_cheap(counted: CountedClient, what: str) -> None:
    assert counted.total <= MAX_CALLS_PER_DECISION, (
        f"{what}: {dict(counted.calls)} (RPCs {dict(counted.rpcs)})"
    )
    assert not READS_MADE_REDUNDANT & (set(counted.calls) | set(counted.rpcs)), (
        f"{what} read what the update's validator checks: {dict(counted.calls)} / {dict(counted.rpcs)}"
    )
    assert counted.calls["start_workflow_update"] == 1, dict(counted.calls)


async def test_an_http_decision_costs_at_most_two_temporal_calls(env: TaskEnv) -> None:
    """An approval POSTed to the HTTP API reaches the task with at most two outbound calls of the
    API's client (the status query and the update), and no describe or history read."""
    counted = await CountedClient.connect(env.address, env.client)
    auth = Authenticator("token", {LEAD: "finance-lead"})
    app = build_api(counted.client, ApiConfig(auth=auth, task_queue=env.task_queue))
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    body = {"request_id": request.request_id, "version": request.version, "decision": "approve"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as api:
        counted.reset()
        reply = await api.post(
            f"/v1/tasks/{handle.id}/decisions", json=body, headers={"Authorization": f"Bearer {LEAD}"}
        )
    assert reply.status_code == 200 and reply.json()["accepted"] is True, reply.text
    assert_cheap(counted, "an HTTP decision")


async def test_an_inbox_form_decision_costs_at_most_two_temporal_calls(env: TaskEnv, tmp_path: Any) -> None:
    """A decision submitted as the inbox's form is parsed once and sent with at most two calls."""
    counted = await CountedClient.connect(env.address, env.client)
    service = InboxService(counted.client, tmp_path)
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    form = {"request_id": request.request_id, "version": request.version, "decision": "approve"}
    counted.reset()
    outcome = await service.decide(handle.id, "finance-lead", form)
    assert outcome.accepted, outcome.detail
    assert_cheap(counted, "an inbox decision")


async def test_a_cli_decision_costs_at_most_two_temporal_calls(env: TaskEnv, capsys: Any) -> None:
    """`agent-worker approve` sends its decision with at most two outbound calls of its client (the
    update alone when the version is given and nothing is signed)."""
    counted = await CountedClient.connect(env.address, env.client)
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    argv = [
        *("approve", handle.id, "--request", request.request_id),
        *("--version", request.version, "--as", "finance-lead"),
    ]
    args: argparse.Namespace = build_parser().parse_args(argv)
    ctx = CountedContext(config=env.config)
    ctx.counted = counted
    counted.reset()
    assert await cmd_decide(args, ctx) == 0
    assert capsys.readouterr().out.startswith(f"{handle.id}: ")
    assert_cheap(counted, "a CLI decision")


async def test_signed_decisions_cost_at_most_two_temporal_calls(env: TaskEnv, tmp_path: Any) -> None:
    """Where the policy requires signatures, the API signs from the status it read (no policy read
    from history) and `approve --sign` reads the run chain with the same query: two calls each, and
    both decisions are accepted (the signature verified by the task)."""
    from tests.test_signed_approvals import signed_spec

    keys = tmp_path / "keys"
    counted = await CountedClient.connect(env.address, env.client)
    auth = Authenticator("token", {LEAD: "finance-lead"})
    app = build_api(counted.client, ApiConfig(auth=auth, task_queue=env.task_queue, keys_dir=keys))
    spec = signed_spec(keys)
    handle = await env.start(spec)
    [request] = (await env.awaiting_approval(handle)).pending
    body = {"request_id": request.request_id, "version": request.version, "decision": "approve"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as api:
        counted.reset()
        reply = await api.post(
            f"/v1/tasks/{handle.id}/decisions", json=body, headers={"Authorization": f"Bearer {LEAD}"}
        )
    assert reply.status_code == 200 and reply.json()["accepted"] is True, reply.text
    assert_cheap(counted, "a signed HTTP decision")

    other = await env.start(spec)
    [asked] = (await env.awaiting_approval(other)).pending
    argv = [
        *("approve", other.id, "--request", asked.request_id, "--version", asked.version),
        *("--as", "finance-lead", "--sign", "--keys-dir", str(keys)),
    ]
    ctx = CountedContext(config=env.config)
    ctx.counted = counted
    counted.reset()
    assert await cmd_decide(build_parser().parse_args(argv), ctx) == 0
    assert_cheap(counted, "a signed CLI decision")
    status = await env.wait_status(other, lambda s: not s.pending)
    assert not status.ignored, status.ignored
