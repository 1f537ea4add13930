"""A worker process killed (SIGKILL) while a turn streams: the retried attempt, on another worker
process, streams into the same stream after the partial answer, which a ``superseded`` entry
voids; the text a reader assembles is the task's output. Over both backends: the local SQLite file
(one host) and Redis Streams (a fleet)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent_worker.activities.stores.redis_streams import RedisStreamBackend
from agent_worker.activities.stores.streams import SqliteStreamBackend, StreamBackend
from agent_worker.schemas.streams import StreamEntry, assemble_text, voided
from agent_worker.schemas.tasks import TaskPhase, TaskResult

from tests.helpers.openai_stub import OpenAIStub, response_json
from tests.helpers.redis_server import redis_server
from tests.helpers.support import TaskEnv, sigkill, worker_process

PARTIAL = " ".join(f"draft{i}" for i in range(60))  # 60 words, 0.15 s apart: killed midway
ANSWER = "The command printed streamed, so the check passed and nothing else needs doing."
SPEC = {
    "agent": "shell",
    "prompt": "run the check",
    "policy": {"rules": [{"effect": "sandbox", "decision": "allow", "reason": "contained"}]},
}


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


def shell_call() -> dict[str, object]:
    """A Responses answer calling run_shell."""
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_check",
        "name": "run_shell",
        "arguments": json.dumps({"script": "echo streamed"}),
        "status": "completed",
    }
    return {**response_json(""), "output": [call]}


async def read_until(
    backend: StreamBackend,
    task_id: str,
    chain: str,
    seen: list[StreamEntry],
    done: Callable[[list[StreamEntry]], bool],
    within: float = 40,
) -> None:
    deadline = time.monotonic() + within
    while not done(seen):
        assert time.monotonic() < deadline, f"the stream never got there: {[e.kind for e in seen]}"
        after = seen[-1].offset if seen else 0
        seen += await asyncio.to_thread(backend.read, task_id, chain, after, 500, 200)


def draft_started(seen: list[StreamEntry]) -> bool:
    """Turn 2 has streamed a few words."""
    return sum(e.turn == 2 and e.kind == "token" for e in seen) >= 3


@pytest.mark.parametrize("backend_name", ["local", "redis"])
async def test_sigkill_mid_stream_the_retry_streams_on_and_the_partial_answer_is_superseded(
    config_env: TaskEnv, tmp_path: Path, backend_name: str, request: pytest.FixtureRequest
) -> None:
    """Worker 1 answers turn 1 (a tool call) and is killed while turn 2 streams a long draft;
    worker 2 retries turn 2. One stream, offsets 1..N: turn 1 and the draft from worker 1, then a
    superseded entry for attempt 2 and the answer from worker 2. The draft (a strict prefix of
    what the model was writing) is voided, and the reader's assembled text is the task's output."""
    env = config_env
    extra = {
        "AGENT_WORKER_MODEL_PROVIDER": "openai",
        "OPENAI_API_KEY": "sk-test-not-real",
        "AGENT_WORKER_OPENAI_MODEL": "gpt-test",
    }
    if backend_name == "redis":
        url = request.getfixturevalue("redis_url")
        backend: StreamBackend = RedisStreamBackend(url)
        extra |= {"AGENT_WORKER_STREAM_BACKEND": "redis", "AGENT_WORKER_STREAM_URL": url}
    else:
        backend = SqliteStreamBackend(env.config.stream_db)
    with OpenAIStub() as stub:
        extra["OPENAI_BASE_URL"] = stub.base_url
        stub.reply(body=shell_call())
        stub.reply_text(PARTIAL, chunk_delay=0.15)
        stub.always(text=ANSWER, chunk_delay=0.02)
        async with worker_process(env, tmp_path / "worker-1.log", **extra) as first:
            handle = await env.start(SPEC)
            chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
            seen: list[StreamEntry] = []
            await read_until(backend, handle.id, chain, seen, draft_started)
            await sigkill(first)
        async with worker_process(env, tmp_path / "worker-2.log", **extra) as second:
            result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and result.final_output == ANSWER

    entries = await asyncio.to_thread(backend.read, handle.id, chain, 0, 10_000)
    backend.close()
    assert [e.offset for e in entries] == list(range(1, len(entries) + 1))
    turns = [e.turn for e in entries if e.kind != "event"]  # lifecycle events carry no turn
    assert turns == sorted(turns), "turns out of order"
    assert any(e.turn == 1 and e.kind == "tool_call" and e.data["name"] == "run_shell" for e in entries)

    draft = [e for e in entries if e.turn == 2 and e.attempt == 1 and e.kind == "token"]
    text = "".join(e.data["text"] for e in draft)
    assert text and PARTIAL.startswith(text) and len(text) < len(PARTIAL)
    [superseded] = [e for e in entries if e.kind == "superseded"]
    assert (superseded.turn, superseded.attempt, superseded.data["reason"]) == (2, 2, "retry")
    assert all(e.offset < superseded.offset for e in draft)
    assert {e.offset for e in draft} <= voided(entries)
    assert assemble_text(entries) == result.final_output

    # Two processes wrote the one stream, in turn: the first up to its death, the second after.
    writers = [e.writer for e in entries]
    w1, w2 = f":{first.pid}", f":{second.pid}"
    assert writers[0].endswith(w1) and writers[-1].endswith(w2)
    switch = next(i for i, w in enumerate(writers) if w.endswith(w2))
    assert all(w.endswith(w1) for w in writers[:switch]) and all(w.endswith(w2) for w in writers[switch:])
    assert entries[switch] == superseded
