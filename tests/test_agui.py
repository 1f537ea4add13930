"""The AG-UI endpoint (``POST /v1/agui``, docs/ag-ui.md), against a real dev server, a worker whose
model streams (a local OpenAI-compatible server, slowly on purpose) and the API: the doc's Node
example with the official ``@ag-ui/client`` follows a task, sees its tokens, is cut mid-message and
resumes with its cursor, answers the approval interrupt, and sees the task complete; the API's page
in headless Chromium has its connection broken mid-answer, resumes, renders the tokens and answers
the approval with a click; an answer sent twice is reported, not sent twice; the translation
resumes whole from any cursor; and the route is behind the API's guard like the others."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent
from agent_worker.activities.stores.state import build_stream_backend
from agent_worker.api import ApiConfig, build_api
from agent_worker.api.agui_events import CURSOR, Translator
from agent_worker.inbox.auth import Authenticator
from agent_worker.inbox.serve import serving
from agent_worker.schemas.streams import StreamEntry, assemble_text
from agent_worker.schemas.tasks import TaskPhase
from temporalio.client import Client

from agent_worker.client import AgentWorkerClient
from tests.helpers.browser import chromium
from tests.helpers.openai_stub import OpenAIStub, response_json
from tests.helpers.support import (
    REPO,
    DevServer,
    TaskEnv,
    assert_replays,
    example_spec,
    make_config,
    running_worker,
    until,
)

PACKAGE = REPO / "clients" / "agui-node"
DOC = REPO / "docs" / "ag-ui.md"
BLOCK = re.compile(r"^```js agui\n(.*?)^```$", re.MULTILINE | re.DOTALL)
LEAD = "lead-0f3c9a7e51d2b8c4"
TOKENS = {LEAD: "finance-lead"}
NPM_SECONDS = 600
NODE_SECONDS = 300
FIRST = (
    "I will record the value you gave me once finance signs off: the quarter closed at forty two "
    "thousand, north and west carried it, and south held steady against a slow summer."
)
SECOND = "Recorded: the value forty two is in the business system now, confirmed by its receipt."
SPEC = {
    "agent": "recorder",
    "prompt": "record: 42",
    "tenant": "acme",
    "policy": {"default_approvers": ["finance-lead"]},
}


def first_reply() -> dict[str, Any]:
    """The model's first answer: text, then the write that needs an approval."""
    body = response_json(FIRST)
    body["output"].append(
        {
            "type": "function_call",
            "id": "fc_record",
            "call_id": "call_record",
            "name": "record_value",
            "arguments": json.dumps({"value": "42"}),
            "status": "completed",
        }
    )
    return body


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(chunk_delay=0.05) as server:
        server.reply(body=first_reply())
        server.reply(body=response_json(SECOND))
        yield server


@pytest.fixture
async def agui_env(
    client: Client, dev_server: DevServer, tmp_path: Path, stub: OpenAIStub
) -> AsyncIterator[TaskEnv]:
    config = make_config(tmp_path / "data", **stub.settings())
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        yield env


def api_app(env: TaskEnv) -> Any:
    config = ApiConfig(
        auth=Authenticator("token", TOKENS),
        task_queue=env.task_queue,
        streams=build_stream_backend(env.config),
    )
    return build_api(env.client, config)


def npm(*args: str) -> None:
    done = subprocess.run(
        ["npm", *args], cwd=PACKAGE, capture_output=True, text=True, timeout=NPM_SECONDS, check=False
    )
    assert done.returncode == 0, f"npm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="session")
def agui_client() -> Path:
    """clients/agui-node with its pinned ``@ag-ui/client`` installed (only when the lock file changed
    since: scripts/test-machine.sh did it already on a test machine). Never skipped."""
    assert shutil.which("node") and shutil.which("npm"), "node and npm: run scripts/test-machine.sh"
    installed = PACKAGE / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < (PACKAGE / "package-lock.json").stat().st_mtime:
        npm("ci", "--no-audit", "--no-fund", "--loglevel=error")
    return PACKAGE


async def test_the_node_example_follows_resumes_after_a_cut_and_answers_the_approval(
    agui_client: Path, agui_env: TaskEnv, tmp_path: Path
) -> None:
    """The doc's example, as written, with the official @ag-ui/client in Node: it sees the first
    answer's tokens, drops its connection after 5 of them (mid-message: the stream holds later
    tokens of it), runs again from its cursor and gets the rest of the message with nothing lost or
    repeated (the message's text is the model's answer, exactly); its run ends with the approval
    as an interrupt carrying the write's arguments, which it answers with `resume`; the next run
    streams the second answer and ends with the task completed. Temporal holds the approval by
    finance-lead, and the write happened once."""
    [example] = BLOCK.findall(DOC.read_text())
    script = agui_client / "example.test-run.mjs"  # beside its node_modules, as a user runs it
    script.write_text(example)
    handle = await agui_env.start(SPEC)
    try:
        async with serving(api_app(agui_env), "127.0.0.1:0") as url:
            node = await asyncio.create_subprocess_exec(
                "node", str(script), cwd=agui_client,
                env={**os.environ, "AGENT_WORKER_API_URL": url, "AGENT_WORKER_API_TOKEN": LEAD,
                     "TASK_ID": handle.id, "CUT_AFTER_TOKENS": "5"},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                out, err = await asyncio.wait_for(node.communicate(), NODE_SECONDS)
            finally:
                if node.returncode is None:
                    node.kill()
                    await node.wait()
    finally:
        script.unlink(missing_ok=True)
    lines = out.decode().splitlines()
    assert node.returncode == 0, f"{out.decode()}\n{err.decode()}"

    [cut] = [line for line in lines if line.startswith("cut after cursor ")]
    cursor = int(cut.rsplit(" ", 1)[1])
    stream = build_stream_backend(agui_env.config)
    assert stream is not None
    chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
    entries = await asyncio.to_thread(stream.read, handle.id, chain, 0, 10_000)
    first_tokens = [e.offset for e in entries if e.kind == "token" and e.turn == 1]
    assert first_tokens[0] <= cursor < first_tokens[-1], "the cut was not in the middle of the message"
    assert lines.index(cut) < lines.index(next(line for line in lines if line.startswith("asked ")))

    messages = [json.loads(line.removeprefix("message ")) for line in lines if line.startswith("message ")]
    texts = [m["text"] for m in messages]
    assert texts == [FIRST, SECOND], texts  # whole across the cut, nothing repeated
    tool_calls = [c for m in messages for c in m["toolCalls"]]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in tool_calls] == [
        ("record_value", {"value": "42"})
    ]
    assert lines.count('asked record_value {"value":"42"}') == 1
    assert [json.loads(line.removeprefix("token ")) for line in lines if line.startswith("token ")][:5] == (
        re.findall(r"\s*\S+\s*", FIRST)[:5]
    )
    state = json.loads(
        next(line for line in reversed(lines) if line.startswith("state ")).removeprefix("state ")
    )
    assert (state["phase"], state["finalOutput"], state["pending"]) == ("completed", SECOND, [])
    runs = [line for line in lines if line == "event RUN_STARTED"]
    assert len(runs) == 3  # cut, interrupted, completed

    result = await AgentWorkerClient(agui_env.client, agui_env.task_queue).result(handle.id)
    assert result.phase is TaskPhase.COMPLETED and result.final_output == SECOND
    [approval] = result.evidence.approvals
    assert (approval.decision.value, approval.principal, approval.reason) == (
        "approve", "finance-lead", "figures checked",
    )  # fmt: skip
    assert agui_env.business().count() == 1
    await assert_replays(agui_env.client, handle.id)


class CutFirstRun:
    """The API, except that the first AG-UI run's connection breaks after ``frames`` SSE frames, as a
    network that drops mid-answer: the response is abandoned (an exception, so the server closes
    the connection without ending the chunked body) and the browser's read fails."""

    def __init__(self, app: Any, frames: int) -> None:
        self.app, self.frames, self.cut = app, frames, False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.cut or scope["type"] != "http" or scope["path"] != "/v1/agui":
            await self.app(scope, receive, send)
            return
        self.cut = True
        sent = 0

        async def sending(message: Any) -> None:
            nonlocal sent
            if message["type"] == "http.response.body" and message.get("body"):
                sent += 1
                if sent > self.frames:
                    raise ConnectionResetError("the test cut the connection")
            await send(message)

        await self.app(scope, receive, sending)


async def test_the_page_renders_tokens_resumes_after_a_cut_and_answers_the_approval_in_chromium(
    agui_env: TaskEnv,
) -> None:
    """The API's page (`GET /agui`), in headless Chromium: its first run's connection breaks after
    15 frames, in the middle of the first answer; the page runs again after its last cursor and
    shows the answer whole, once, token by token (one content event per word), then the write's
    arguments and an Approve button for the interrupt; a click approves (through the decision
    path, as finance-lead), and the page shows the second answer and the task completed."""
    handle = await agui_env.start(SPEC)
    driver = await asyncio.to_thread(chromium)
    try:
        async with serving(CutFirstRun(api_app(agui_env), 15), "127.0.0.1:0") as url:
            await asyncio.to_thread(driver.get, f"{url}/agui?task={handle.id}#token={LEAD}")

            def script(code: str) -> Any:
                return driver.execute_script(code)

            async def text() -> str:
                assert not await asyncio.to_thread(script, "return window.agui.problems")
                return await asyncio.to_thread(script, "return document.getElementById('log').innerText")

            async def asked() -> bool:
                await text()
                return await asyncio.to_thread(script, "return !!document.getElementById('approve-0')")

            await until(asked, 90, "the page to show the approval")
            shown = await text()
            assert shown.count(FIRST) == 1 and 'record_value {"value": "42"}' in shown, shown
            cuts = await asyncio.to_thread(script, "return window.agui.cuts")
            assert len(cuts) == 1, cuts  # the page saw its first run break, and ran again
            kinds = await asyncio.to_thread(script, "return window.agui.events")
            assert kinds.count("TEXT_MESSAGE_CONTENT") == len(re.findall(r"\S+", FIRST))  # token by token
            assert kinds.count("RUN_STARTED") == 2
            cut_run = kinds[: kinds.index("RUN_STARTED", 1)]
            assert "TEXT_MESSAGE_CONTENT" in cut_run and "TEXT_MESSAGE_END" not in cut_run  # mid-message
            phase = await asyncio.to_thread(script, "return document.getElementById('phase').innerText")
            assert phase == "awaiting_approval"
            await asyncio.to_thread(script, "document.getElementById('approve-0').click()")

            async def done() -> bool:
                return await asyncio.to_thread(script, "return window.agui.finished") is not None

            await until(done, 120, "the page to see the task finish")
            finished = await asyncio.to_thread(script, "return window.agui.finished")
            shown = await text()
            phase = await asyncio.to_thread(script, "return document.getElementById('phase').innerText")
    finally:
        await asyncio.to_thread(driver.quit)
    assert finished["phase"] == "completed" and phase == "completed"
    assert SECOND in shown and shown.count(FIRST) == 1
    result = await AgentWorkerClient(agui_env.client, agui_env.task_queue).result(handle.id)
    [approval] = result.evidence.approvals
    assert (result.phase, approval.principal) == (TaskPhase.COMPLETED, "finance-lead")
    assert agui_env.business().count() == 1


def entries_of(texts: list[str]) -> list[StreamEntry]:
    """A turn's stream: started, the texts as tokens of one model call, a tool call, finished."""
    kinds: list[tuple[str, dict[str, Any]]] = [("step", {"step": "turn.started"})]
    kinds += [("token", {"text": t}) for t in texts]
    kinds += [("tool_call", {"name": "record_value", "call_id": "c1", "arguments": '{"value":"42"}'})]
    kinds += [("step", {"step": "turn.finished"}), ("token", {"text": "after"})]
    return [
        StreamEntry(task_id="t", turn=1 if n < len(kinds) - 1 else 2, offset=n + 1, kind=k, data=d)  # type: ignore[arg-type]
        for n, (k, d) in enumerate(kinds)
    ]


def test_a_run_resumed_from_any_cursor_makes_the_same_messages() -> None:
    """For a cut after every event that carries a cursor, the events of the cut run plus those of a
    run resumed from that cursor (its state rebuilt from the entries before it, the open message
    reopened with its id) give each message the same text as an uncut run: nothing lost or
    repeated, and every message started before its content and ended once per run."""
    entries = entries_of(["The ", "quarter ", "closed ", "well."])

    def messages(events: list[Any]) -> dict[str, str]:
        texts: dict[str, str] = {}
        open_ids: set[str] = set()
        for event in events:
            if isinstance(event, TextMessageStartEvent):
                assert event.message_id not in open_ids
                open_ids.add(event.message_id)
                texts.setdefault(event.message_id, "")
            elif isinstance(event, TextMessageContentEvent):
                assert event.message_id in open_ids
                texts[event.message_id] += event.delta
            elif isinstance(event, TextMessageEndEvent):
                open_ids.remove(event.message_id)
        return texts

    whole = Translator()
    uncut = [e for entry in entries for e in whole.feed(entry)] + whole.close()
    assert messages(uncut) == {"msg-2": assemble_text(entries, turn=1), "msg-8": "after"}
    cursors = [e.metadata[CURSOR] for e in uncut if e.metadata and CURSOR in e.metadata]
    assert cursors == [entry.offset for entry in entries]
    for cursor in cursors:
        first = Translator()
        cut = [e for entry in entries if entry.offset <= cursor for e in first.feed(entry)] + first.close()
        again = Translator()
        for entry in entries:
            if entry.offset <= cursor:
                again.feed(entry)
        resumed = again.reopen() + [
            e for entry in entries if entry.offset > cursor for e in again.feed(entry)
        ]
        resumed += again.close()
        joined = messages(cut)
        for message_id, text in messages(resumed).items():
            joined[message_id] = joined.get(message_id, "") + text
        assert joined == messages(uncut), cursor


async def test_the_route_refuses_a_missing_token_and_an_oversized_body(env: TaskEnv) -> None:
    """POST /v1/agui without a bearer token is refused (401) and with a body over
    api_max_body_bytes too (413), before the task is looked at; a task the caller may not see is 404;
    a run counts as an open stream (429 past api_max_streams, where a plain read still answers)."""
    config = ApiConfig(
        auth=Authenticator("token", TOKENS),
        task_queue=env.task_queue,
        streams=build_stream_backend(env.config),
        max_body_bytes=4096,
    )
    run = {"threadId": "acme/nothing", "runId": "r1", "messages": [], "state": {}, "tools": [], "context": []}
    transport = httpx.ASGITransport(app=build_api(env.client, config))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
        anonymous = await api.post("/v1/agui", json=run)
        assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
        big = {**run, "messages": [{"id": "m1", "role": "user", "content": "x" * 5000}]}
        oversized = await api.post("/v1/agui", json=big, headers={"Authorization": f"Bearer {LEAD}"})
        assert oversized.status_code == 413, oversized.text
        missing = await api.post("/v1/agui", json=run, headers={"Authorization": f"Bearer {LEAD}"})
        assert missing.status_code == 404, missing.text
    # A run is one of the caller's open streams: with none allowed, it is refused before the task is read.
    full = ApiConfig(auth=Authenticator("token", TOKENS), task_queue=env.task_queue, max_streams=0)
    transport = httpx.ASGITransport(app=build_api(env.client, full))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
        refused = await api.post("/v1/agui", json=run, headers={"Authorization": f"Bearer {LEAD}"})
        assert refused.status_code == 429, refused.text
        assert (
            await api.get("/v1/tasks/acme/nothing", headers={"Authorization": f"Bearer {LEAD}"})
        ).status_code == 404


def run_events(body: str) -> list[dict[str, Any]]:
    """The AG-UI events of one run's Server-Sent Events."""
    return [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]


async def test_an_answer_sent_twice_is_reported_ignored_and_a_foreign_interrupt_is_refused(
    env: TaskEnv,
) -> None:
    """With the scripted monthly report: a run ends with the approval as an interrupt (the
    submit_report call's arguments in TOOL_CALL_ARGS and in the interrupt); its answer approves it
    (as finance-lead, in the evidence); the same answer sent again by a second run is not sent to
    the task twice but reported as `decision.ignored`, and that run goes on to the task's end; an
    interrupt id that is not one of ours is refused (400) before anything reaches the task."""
    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    bearer = {"Authorization": f"Bearer {LEAD}"}
    run = {"threadId": handle.id, "runId": "r1", "messages": [], "state": {}, "tools": [], "context": []}
    transport = httpx.ASGITransport(app=api_app(env))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=120) as api:
        first = run_events((await api.post("/v1/agui", json=run, headers=bearer)).text)
        assert first[0]["type"] == "RUN_STARTED" and first[-1]["type"] == "RUN_FINISHED"
        [interrupt] = first[-1]["outcome"]["interrupts"]
        [args] = [
            e for e in first if e["type"] == "TOOL_CALL_ARGS" and e["toolCallId"] == interrupt["toolCallId"]
        ]
        assert json.loads(args["delta"]) == interrupt["metadata"]["arguments"]
        assert interrupt["metadata"]["tool"] == "submit_report" and interrupt["reason"] == "approval"

        foreign = {**run, "resume": [{"interruptId": "req-1", "status": "resolved", "payload": {}}]}
        assert (await api.post("/v1/agui", json=foreign, headers=bearer)).status_code == 400
        answer = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"decision": "approve"}}
        cursor = [e["metadata"]["cursor"] for e in first if "cursor" in e.get("metadata", {})][-1]
        resumed = {**run, "runId": "r2", "resume": [answer], "forwardedProps": {"cursor": cursor}}
        second = run_events((await api.post("/v1/agui", json=resumed, headers=bearer)).text)
        again = run_events((await api.post("/v1/agui", json={**resumed, "runId": "r3"}, headers=bearer)).text)
    assert not [e for e in second if e["type"] == "CUSTOM" and e["name"] == "decision.ignored"]
    [ignored] = [e for e in again if e["type"] == "CUSTOM" and e["name"] == "decision.ignored"]
    assert ignored["value"]["interruptId"] == interrupt["id"]
    for events in (second, again):
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"]["phase"] == "completed"
    result = await AgentWorkerClient(env.client, env.task_queue).result(handle.id)
    [approval] = result.evidence.approvals
    assert (approval.decision.value, approval.principal) == ("approve", "finance-lead")
    assert env.business().count() == 1
