"""What a user sees at the doors, against a real dev server: a task id that is not a plain printable
token (a CRLF, a space, a tab, too long) is refused by the client, the CLI and the HTTP API alike,
naming the field, before anything starts, and a notifier copes with one that got in raw; and
``agent-worker approve`` with no worker polling the task queue says on stderr that it is waiting
for a worker, then gives up clearly after its timeout."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from agent_worker.activities.notify import WebhookNotifier
from agent_worker.api import ApiConfig, build_api
from agent_worker.cli.main import main as cli_main
from agent_worker.inbox.auth import Authenticator
from agent_worker.schemas.notify import NotifyInput
from agent_worker.schemas.validation import InvalidPayload
from temporalio.service import RPCError, RPCStatusCode

from agent_worker.client import AgentWorkerClient
from tests.helpers.receivers import webhook_receiver
from tests.helpers.support import TaskEnv, example_spec

BAD_IDS = ["crlf\r\ntask", "line\nfeed", "tab\tid", "space id", "", "x" * 201, "caf\u00e9"]
TOKEN = "lead-0f3c9a7e51d2b8c4"


async def _exists(env: TaskEnv, task_id: str) -> bool:
    try:
        await env.client.get_workflow_handle(task_id).describe()
    except RPCError as err:
        if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            return False
        raise
    return True


@pytest.mark.parametrize("task_id", BAD_IDS)
async def test_the_client_refuses_a_task_id_with_control_characters_naming_the_field(
    config_env: TaskEnv, task_id: str
) -> None:
    """``AgentWorkerClient.start`` raises ``InvalidPayload`` naming ``task_id`` and the rule; no
    workflow exists under that id."""
    tasks = AgentWorkerClient(config_env.client, config_env.task_queue)
    with pytest.raises(InvalidPayload) as refused:
        await tasks.start(example_spec(), task_id)
    message = str(refused.value)
    assert message.startswith("invalid task_id: ") and "A-Z a-z 0-9 . _ : / -" in message
    assert "\r" not in message and "\n" not in message  # shown escaped, never as a line break
    if task_id:
        assert not await _exists(config_env, task_id)


async def test_the_cli_refuses_a_crlf_task_id_before_starting_anything(
    config_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agent-worker start --id $'a\\r\\nb'`` exits 2 naming ``--id``; nothing is started."""
    task_id = f"crlf-{uuid.uuid4().hex[:6]}\r\ninjected"
    args = ["--address", config_env.address, "start", "--example", "monthly-report", "--id", task_id]
    code = await asyncio.to_thread(cli_main, [*args, "--task-queue", config_env.task_queue])
    captured = capsys.readouterr()
    assert code == 2
    assert "invalid --id: " in captured.err and "\\r\\n" in captured.err
    assert "started task" not in captured.out
    assert not await _exists(config_env, task_id)


async def test_the_api_refuses_a_crlf_task_id_naming_the_field(config_env: TaskEnv) -> None:
    """``POST /v1/tasks`` with a CRLF ``task_id`` answers 422 naming ``task_id``; a plain id starts."""
    config = ApiConfig(
        auth=Authenticator("token", {TOKEN: "finance-lead"}),
        task_queue=config_env.task_queue,
        tenants={"finance-lead": ["acme"]},
    )
    transport = httpx.ASGITransport(app=build_api(config_env.client, config))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers) as api:
        bad = f"crlf-{uuid.uuid4().hex[:6]}\r\nx"
        answer = await api.post("/v1/tasks", json={"spec": example_spec(), "task_id": bad})
        assert answer.status_code == 422
        assert [e["loc"] for e in answer.json()["detail"]] == [["body", "task_id"]]
        assert not await _exists(config_env, bad)
        good = f"ok-{uuid.uuid4().hex[:6]}.v1:a/b_c"
        answer = await api.post("/v1/tasks", json={"spec": example_spec(), "task_id": good})
        assert answer.status_code == 201, answer.text
        started = answer.json()["task_id"]
    assert started.endswith(f"/{good}")  # the chosen id, scoped to the spec's tenant
    await config_env.client.get_workflow_handle(started).terminate("test over")


async def test_approve_with_no_worker_says_it_is_waiting_then_gives_up_clearly(
    config_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no worker polling the task queue, `agent-worker approve` first says on stderr that it is
    waiting for a worker (and until when), then exits 1 saying no worker answered, that the decision
    was not applied, and how to send it durably (--signal)."""
    handle = await config_env.start(example_spec())
    approve = [
        *("--address", config_env.address, "approve", handle.id, "--request", "req-1"),
        *("--version", "sha256:" + "0" * 64, "--as", "finance-lead", "--timeout", "6"),
    ]
    code = await asyncio.wait_for(asyncio.to_thread(cli_main, approve), 60)
    err = capsys.readouterr().err
    assert code == 1
    waiting = err.index(f"waiting for a worker to take the decision on task {handle.id}")
    assert "giving up after 6 s" in err
    gave_up = err.index("no worker answered")
    assert waiting < gave_up
    assert "the decision was not applied" in err and "--signal" in err
    await handle.terminate("test over")


async def test_a_webhook_notice_for_a_crlf_task_id_is_delivered_with_the_key_percent_encoded() -> None:
    """A task id with a line break (started raw, past the client's check) does not make every
    notification send fail: the ``Idempotency-Key`` is percent-encoded, and a plain key is unchanged."""
    with webhook_receiver() as hook:
        notifier = WebhookNotifier(hook.url)
        for key in ("crlf\r\ntask/chain-1/req-1/reminder", "plain-1.2:x/chain-1/req-1/reminder"):
            await notifier.send(_note(key), "a reminder")
    assert [key for key, _ in hook.posts] == [
        "crlf%0D%0Atask/chain-1/req-1/reminder",
        "plain-1.2:x/chain-1/req-1/reminder",
    ]


def _note(key: str) -> NotifyInput:
    return NotifyInput(
        key=key,
        kind="reminder",
        task_id=key.split("/", 1)[0],
        tenant="acme",
        agent="monthly-report",
        request_id="req-1",
        tool="submit_report",
        version="sha256:" + "0" * 64,
        recipients=["finance-lead"],
    )
