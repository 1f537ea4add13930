"""Secrets reach no reader: a task whose command prints a configured secret and a key-shaped one,
and whose model repeats them in its answer, shows neither raw in its live stream (`/stream`), in the
API's task view (`GET /v1/tasks/{id}`), in the client's status and result, or in its command record;
each shows the mask instead."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx
from agent_worker.activities.agent.streaming import HELD_TOKEN_CHARS, TurnStream
from agent_worker.activities.stores.state import build_stream_backend
from agent_worker.activities.stores.streams import SqliteStreamBackend
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox.auth import Authenticator
from agent_worker.schemas.tasks import TaskPhase
from agent_worker.security.redact import MASK, register_secrets
from temporalio.client import Client

from agent_worker.client import AgentWorkerClient
from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import DevServer, TaskEnv, make_config, running_worker

LEAD = "lead-token-5b7e9c1d"


async def test_a_secret_in_a_command_and_the_answer_reaches_no_stream_entry_task_view_or_command_record(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """The `shell` agent runs `echo SECRET KEY` (SECRET: a value the worker is configured with; KEY:
    shaped like an OpenAI key) and answers with what it printed: the `/stream` entries (the answer's
    tokens among them), `GET /v1/tasks/{id}`, the client's `status` and `result` (final output and
    the command record: argv and stdout) hold the mask and neither value."""
    secret = f"hush-{uuid.uuid4().hex}"  # configured: masked as a literal
    shaped = f"sk-{uuid.uuid4().hex}"  # never configured: masked by its shape
    config = make_config(tmp_path / "data", openai_api_key=secret)
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    tasks = AgentWorkerClient(client, env.task_queue)
    async with running_worker(client, config):
        prompt = f"run: echo {secret} {shaped}"
        spec = {"agent": "shell", "prompt": prompt, "policy": {"default_approvers": ["lead"]}}
        handle = await env.start(spec)
        result = await tasks.result(handle.id)
        status = await tasks.status(handle.id)
        api = ApiConfig(
            auth=Authenticator("token", {LEAD: "lead"}),
            task_queue=env.task_queue,
            streams=build_stream_backend(config),
        )
        transport = httpx.ASGITransport(app=build_api(client, api))
        async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as http:
            headers = {"Authorization": f"Bearer {LEAD}"}
            view = await http.get(f"/v1/tasks/{handle.id}", headers=headers)
            stream = await asyncio.wait_for(http.get(f"/v1/tasks/{handle.id}/stream", headers=headers), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert view.status_code == 200 and stream.status_code == 200

    [command] = result.evidence.commands
    tokens = [
        json.loads(line[6:])["data"]["text"]
        for line in stream.text.splitlines()
        if line.startswith("data: ") and '"kind":"token"' in line
    ]
    seen = {
        "the answer (result)": result.final_output or "",
        # Less the prompt: the caller's own words, shown back as given.
        "the status": status.model_dump_json(exclude={"prompt"}),
        "the task view": view.text,
        "the live stream": stream.text,
        "the stream's tokens": "".join(tokens),
        "the command's argv": " ".join(command.argv),
        "the command's stdout": command.stdout,
    }
    leaks = [(where, value) for where, text in seen.items() for value in (secret, shaped) if value in text]
    assert leaks == []
    assert f"{MASK} {MASK}" in command.stdout and f"echo {MASK} {MASK}" in command.argv[-1]
    assert MASK in (result.final_output or "") and MASK in "".join(tokens)


async def test_a_secret_in_a_streamed_answer_reaches_no_token_entry_or_final_output(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """A model server streams an answer holding the worker's configured key and a key-shaped value,
    word by word: the token entries of `/stream` (as written by the streaming model) and the
    task's final output hold the mask, never the values."""
    secret = f"hush-{uuid.uuid4().hex}"
    shaped = f"sk-{uuid.uuid4().hex}"
    with OpenAIStub() as stub:
        config = make_config(tmp_path / "data", **{**stub.settings(), "openai_api_key": secret})
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        stub.reply_text(f"The key is {secret} and the other is {shaped} today.")
        async with running_worker(client, config):
            handle = await env.start({"agent": "plain", "prompt": "what is the key?"})
            result = await AgentWorkerClient(client, env.task_queue).result(handle.id)
        chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
        backend = build_stream_backend(config)
        assert backend is not None
        entries = await asyncio.to_thread(backend.read, handle.id, chain, 0, 10_000)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    tokens = [e.data["text"] for e in entries if e.kind == "token"]
    assert len(tokens) > 5, "the answer was not streamed word by word"
    text = "".join(tokens)
    assert text == result.final_output == f"The key is {MASK} and the other is {MASK} today."
    assert not [e for e in entries for value in (secret, shaped) if value in e.model_dump_json()]


async def test_a_secret_split_across_streamed_deltas_is_masked_whole_and_the_text_still_assembles(
    tmp_path: Path,
) -> None:
    """A turn's stream gets a key-shaped secret in three deltas, and a configured one in two: the
    stored token entries never hold either value (nor a fragment past its first characters), their
    text joins to the answer with each secret masked once, and a long word with no space is not
    held back past `HELD_TOKEN_CHARS`."""
    secret = f"hush-{uuid.uuid4().hex}"
    register_secrets(secret)
    shaped = f"sk-{uuid.uuid4().hex}"
    backend = SqliteStreamBackend(tmp_path / "streams.db")
    stream = TurnStream(backend, "t-split", "chain", 1)
    stream.begin_call(1)
    deltas = ["The key is ", shaped[:5], shaped[5:20], shaped[20:] + " and ", secret[:9], secret[9:], " ok."]
    for delta in deltas:
        stream.emit("token", {"text": delta})
    stream.emit("tool_call", {"name": "x", "call_id": "c1"})
    stream.emit("token", {"text": "y" * (HELD_TOKEN_CHARS + 10)})
    # No await since the first emit: nothing was flushed yet; the long word is queued, not held.
    assert stream._pending[-1].data == {"text": "y" * (HELD_TOKEN_CHARS + 10)}
    await stream.close()
    entries = await asyncio.to_thread(backend.read, "t-split", "chain", 0, 100)
    tokens = [e.data["text"] for e in entries if e.kind == "token" and e.call == 1]
    assert "".join(tokens) == f"The key is {MASK} and {MASK} ok." + "y" * (HELD_TOKEN_CHARS + 10)
    assert not [t for t in tokens for value in (secret, shaped) if value[:12] in t]
    assert [e.kind for e in entries][-2:] == ["tool_call", "token"]  # held text went out before the call
