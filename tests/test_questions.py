"""The agent asks a person (`ask_human`), against the dev server: a form's answer over the HTTP API
is checked against its JSON Schema (an invalid one refused naming the field, the question left open)
and the agent's next turn reads the valid one; a choice is answered from the CLI; a question waits
through a worker restart; and `respond` answers a proposed write with a message instead of running
it. The scripted model repeats the tool output it received, so each test reads what the model saw."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox import build_app, running_inbox
from agent_worker.inbox.auth import COOKIE, Authenticator
from agent_worker.inbox.pages import task_url
from agent_worker.schemas.approvals import DecisionKind
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError

from tests.helpers.ask_agents import SAW
from tests.helpers.browser import fetch
from tests.helpers.support import TEST_AGENTS, TaskEnv, assert_replays, make_config, run_cli, running_worker

LEAD = "lead-0f3c9a7e51d2b8c4"
ASK_AGENTS = [*TEST_AGENTS, "tests.helpers.ask_agents:registrations"]
ASK_RULE = {"tool": "ask_human", "decision": "require_approval", "approvers": ["finance-lead"]}


def asking(prompt: str, **policy: Any) -> dict[str, Any]:
    """A task whose agent asks the question ``prompt`` names ('ask form', 'ask choice', 'ask text')."""
    return {"agent": "asker", "prompt": prompt, "policy": {"rules": [ASK_RULE], **policy}}


@pytest.fixture
async def ask_env(config_env: TaskEnv) -> AsyncIterator[TaskEnv]:
    """A task env whose worker also runs the asker."""
    config = make_config(config_env.config.data_dir, agents=ASK_AGENTS)
    env = TaskEnv(client=config_env.client, config=config, address=config_env.address)
    async with running_worker(env.client, config):
        yield env


@pytest.fixture
async def api(ask_env: TaskEnv) -> AsyncIterator[httpx.AsyncClient]:
    config = ApiConfig(auth=Authenticator("token", {LEAD: "finance-lead"}), task_queue=ask_env.task_queue)
    transport = httpx.ASGITransport(app=build_api(ask_env.client, config))
    async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as client:
        yield client


async def updates_accepted(env: TaskEnv, task_id: str) -> int:
    handle = env.client.get_workflow_handle(task_id)
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    return len([e async for e in handle.fetch_history_events() if e.event_type == accepted])


async def test_a_form_answer_that_fails_its_schema_is_refused_over_the_api_and_the_agent_reads_the_valid_one(
    api: httpx.AsyncClient, ask_env: TaskEnv
) -> None:
    """The question waits as a request for finance-lead with its form; an answer whose amount is no
    number is refused (200, not accepted) naming `$.amount` and why, reaches no history, and leaves the
    question open; the valid answer is accepted, and the model's next turn reads exactly it, as JSON."""
    handle = await ask_env.start(asking("ask form"))
    [request] = (await ask_env.awaiting_approval(handle)).pending
    reply = await api.get(f"/v1/tasks/{handle.id}/pending", headers={"Authorization": f"Bearer {LEAD}"})
    assert reply.status_code == 200, reply.text
    [shown] = reply.json()
    assert shown["action"]["tool"] == "ask_human" and shown["action"]["effect"] == "ask"
    assert shown["action"]["operation"]["form"]["required"] == ["amount", "currency"]
    assert shown["approvers"] == ["finance-lead"]

    def answer(value: Any) -> dict[str, Any]:
        return {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "answer",
            "answer": value,
        }

    who = {"Authorization": f"Bearer {LEAD}"}
    refused = await api.post(
        f"/v1/tasks/{handle.id}/decisions", json=answer({"amount": "lots", "currency": "EUR"}), headers=who
    )
    assert refused.status_code == 200 and refused.json()["accepted"] is False, refused.text
    assert "$.amount: 'lots' is not of type 'number'" in refused.json()["detail"]
    missing = await api.post(f"/v1/tasks/{handle.id}/decisions", json=answer({"amount": 5}), headers=who)
    assert (
        missing.json()["accepted"] is False
        and "'currency' is a required property" in missing.json()["detail"]
    )
    still = (await ask_env.awaiting_approval(handle)).pending
    assert [r.request_id for r in still] == [request.request_id]  # the question stays open
    assert await updates_accepted(ask_env, handle.id) == 0  # refused before it reached the history

    valid = {"amount": 120.5, "currency": "EUR"}
    accepted = await api.post(f"/v1/tasks/{handle.id}/decisions", json=answer(valid), headers=who)
    assert accepted.status_code == 200 and accepted.json()["accepted"] is True, accepted.text
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == SAW + json.dumps(valid, sort_keys=True)
    [record] = result.evidence.approvals
    assert (record.decision, record.principal, record.answer) == (DecisionKind.ANSWER, "finance-lead", valid)
    assert result.usage.actions == 0 and ask_env.business().count() == 0
    await assert_replays(ask_env.client, handle.id)


async def test_a_choice_question_is_answered_from_the_cli_and_only_with_one_of_its_options(
    ask_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agent-worker status` shows the question, its options and the command that answers it; an
    answer that is not an option is refused (exit 1, naming the options) and the question stays open;
    `agent-worker answer ... quarterly` is accepted and the model reads 'quarterly'."""
    handle = await ask_env.start(
        {"agent": "asker", "prompt": "ask choice", "policy": {"default_approvers": ["finance-lead"]}}
    )
    [request] = (await ask_env.awaiting_approval(handle)).pending
    code, out, err = await run_cli(capsys, "--address", ask_env.address, "status", handle.id)
    assert code == 0, err
    assert "question: Which report period?" in out and "options:  monthly, quarterly" in out
    assert f"agent-worker answer {handle.id} --request {request.request_id}" in out
    base = ["--address", ask_env.address, "answer", handle.id, "--request", request.request_id]
    base += ["--version", request.version, "--as", "finance-lead"]
    code, out, err = await run_cli(capsys, *base, "weekly")
    assert code == 1 and "'weekly' is not one of the options: 'monthly', 'quarterly'" in err, err
    assert [r.request_id for r in (await ask_env.awaiting_approval(handle)).pending] == [request.request_id]
    code, out, err = await run_cli(capsys, *base, "quarterly")
    assert code == 0, err
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == SAW + "quarterly"
    await assert_replays(ask_env.client, handle.id)


async def test_a_question_waits_through_a_worker_restart_and_a_signalled_answer_reaches_the_agent(
    config_env: TaskEnv,
) -> None:
    """The worker stops while the question waits; the answer, sent as a signal with no worker
    running, is kept by Temporal; a new worker applies it and the model reads it."""
    config = make_config(config_env.config.data_dir, agents=ASK_AGENTS)
    env = TaskEnv(client=config_env.client, config=config, address=config_env.address)
    async with running_worker(env.client, config):
        handle = await env.start(asking("ask text"))
        [request] = (await env.awaiting_approval(handle)).pending
    await handle.signal(
        AgentTaskWorkflow.submit_decision,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "answer",
            "principal": "finance-lead",
            "answer": "the board",
        },
    )
    async with running_worker(env.client, config):
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == SAW + "the board"
    await assert_replays(env.client, handle.id)


async def test_respond_on_a_proposed_write_writes_nothing_and_the_model_reads_the_message(
    ask_env: TaskEnv,
) -> None:
    """finance-lead answers the proposed write with a message instead of approving it: nothing is
    written, the result says `responded`, and the model's next turn reads the message as the tool's
    output; `answer` on that action is refused, it is not a question."""
    spec = {"agent": "recorder", "prompt": "record: 42", "policy": {"default_approvers": ["finance-lead"]}}
    handle = await ask_env.start(spec)
    [request] = (await ask_env.awaiting_approval(handle)).pending
    base = {"request_id": request.request_id, "version": request.version, "principal": "finance-lead"}
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(AgentTaskWorkflow.decide, {**base, "decision": "answer", "answer": "x"})
    assert "is an action, not a question" in str(caught.value.cause)
    message = "use the Q3 figure instead, 41, and say so"
    await handle.execute_update(AgentTaskWorkflow.decide, {**base, "decision": "respond", "reason": message})
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == f"not recorded: not run: finance-lead responded instead: {message}"
    assert ask_env.business().count() == 0 and result.evidence.writes == []
    [record] = result.evidence.approvals
    assert record.decision is DecisionKind.RESPOND and record.reason == message
    assert result.usage.actions == 0
    await assert_replays(ask_env.client, handle.id)


async def test_the_inbox_shows_a_form_question_refuses_an_answer_that_does_not_fit_and_sends_one_that_does(
    ask_env: TaskEnv,
) -> None:
    """The task page shows the question, its JSON Schema and an answer box (and a respond form for no
    action: there is none); a posted answer missing a field is refused (409) naming it, with the
    question still open; the fitting answer is accepted and the model reads it as JSON."""
    handle = await ask_env.start(asking("ask form"))
    [request] = (await ask_env.awaiting_approval(handle)).pending
    app = build_app(ask_env.client, auth="header", principal_header="X-Forwarded-User")
    lead = {"X-Forwarded-User": "finance-lead"}
    async with running_inbox(app, "127.0.0.1:0") as url:
        page = await asyncio.to_thread(fetch, url + task_url(handle.id), headers=lead)
        assert page.status == 200, page.body
        assert "How much should we pay?" in page.body and 'class="form-schema"' in page.body
        assert 'name="answer"' in page.body and 'class="respond"' not in page.body
        cookie = re.search(rf"{COOKIE}=([^;]+)", page.headers["set-cookie"])
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.body)
        assert cookie and csrf
        sent = {**lead, "Cookie": f"{COOKIE}={cookie.group(1)}"}
        form = {"csrf": csrf.group(1), "request_id": request.request_id, "version": request.version}
        form["decision"] = "answer"
        decide = url + task_url(handle.id) + "/decide"
        refused = await asyncio.to_thread(
            fetch, decide, form={**form, "answer": '{"amount": 3}'}, headers=sent
        )
        assert refused.status == 409 and "&#x27;currency&#x27; is a required property" in refused.body
        assert len((await ask_env.awaiting_approval(handle)).pending) == 1
        answer = '{"amount": 3, "currency": "USD"}'
        accepted = await asyncio.to_thread(fetch, decide, form={**form, "answer": answer}, headers=sent)
        assert accepted.status == 200 and "Decision accepted" in accepted.body, accepted.body
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.final_output == SAW + json.dumps(json.loads(answer), sort_keys=True)


async def test_a_question_nobody_answers_expires_under_its_rules_sla_and_the_model_is_told(
    ask_env: TaskEnv,
) -> None:
    """A question whose rule expires it after 2 s with `on_expiry: continue` ends unanswered: the
    task goes on and the model reads that it expired, unanswered, naming who could have answered."""
    rule = {**ASK_RULE, "sla": {"expire_after_seconds": 2, "on_expiry": "continue"}}
    handle = await ask_env.start({"agent": "asker", "prompt": "ask text", "policy": {"rules": [rule]}})
    result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output is not None
    assert result.final_output.startswith(SAW + "expired, unanswered: nobody among finance-lead decided by ")
    assert result.evidence.approvals == []
