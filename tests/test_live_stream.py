"""A task's live stream, end to end: a real worker and dev server, a model server that streams
slowly on purpose. A reader sees the first tokens while the turn's activity is still running, the
text it assembles is the task's output, a reader that disconnects mid-turn resumes through the
API's Server-Sent Events with ``Last-Event-ID`` and gets every later entry once, and
``agent-worker events --follow`` shows the text and steps as they come."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_worker.activities.stores.state import build_stream_backend
from agent_worker.activities.stores.streams import StreamBackend
from agent_worker.api import ApiConfig, build_api
from agent_worker.cli.context import CliContext
from agent_worker.cli.events import cmd_events
from agent_worker.inbox.auth import Authenticator
from agent_worker.inbox.serve import serving
from agent_worker.schemas.streams import StreamEntry, assemble_text
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import DevServer, TaskEnv, make_config, running_worker, until

ANSWER = (
    "The quarterly numbers are in: north grew by twelve percent, south held steady, and west "
    "recovered after a slow summer, so the total is up by seven percent on last year."
)
LEAD, STRANGER, OTHER = "lead-token-4c1d", "stranger-token-9e2f", "globex-token-7a3b"
SPEC = {
    "agent": "plain",
    "prompt": "summarize the quarter",
    "tenant": "acme",
    "policy": {"default_approvers": ["finance-lead"]},
}


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


@pytest.fixture
async def openai_env(
    client, dev_server: DevServer, tmp_path: Path, stub: OpenAIStub
) -> AsyncIterator[TaskEnv]:
    config = make_config(
        tmp_path / "data",
        **stub.settings(),
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        yield env


def backend_of(env: TaskEnv) -> StreamBackend:
    backend = build_stream_backend(env.config)
    assert backend is not None
    return backend


async def chain_of(handle: WorkflowHandle[Any, Any]) -> str:
    return (await handle.describe()).raw_description.workflow_execution_info.first_run_id


async def turn_completed(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether an ``agent.turn`` activity of the task has completed (in its history)."""
    turns: set[int] = set()
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "agent.turn":
                turns.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if event.activity_task_completed_event_attributes.scheduled_event_id in turns:
                return True
    return False


async def test_first_tokens_arrive_before_the_turn_completes_and_assemble_to_the_output(
    openai_env: TaskEnv, stub: OpenAIStub
) -> None:
    """The model streams 40 words over ~4 s: the first token entry is readable while the turn's
    activity has not completed (its history says so) and the text is still partial; at the end the
    text assembled from the token entries is the task's final output, between the turn's started
    and finished steps."""
    stub.reply_text(ANSWER, chunk_delay=0.1)
    handle = await openai_env.start(SPEC)
    backend, chain = backend_of(openai_env), await chain_of(handle)
    deadline = time.monotonic() + 30
    seen: list[StreamEntry] = []
    while not any(e.kind == "token" for e in seen):
        assert time.monotonic() < deadline, f"no token entry within 30 s: {seen}"
        seen += await asyncio.to_thread(
            backend.read, handle.id, chain, seen[-1].offset if seen else 0, 500, 200
        )
    partial = assemble_text(seen)
    assert not await turn_completed(handle), "the first token came only after the turn completed"
    assert partial and ANSWER.startswith(partial) and len(partial) < len(ANSWER) / 2

    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and result.final_output == ANSWER
    entries = await read_until_finished(backend, handle.id, chain)
    assert [e.offset for e in entries] == list(range(1, len(entries) + 1))
    assert assemble_text(entries) == result.final_output
    tokens = [e for e in entries if e.kind == "token"]
    assert len(tokens) > 20 and all(e.turn == 1 and e.attempt == 1 for e in tokens)
    steps = [e.data["step"] for e in entries if e.kind == "step"]
    assert steps[0] == "turn.started" and steps[-1] == "turn.finished"
    turn_entries = [e for e in entries if e.kind != "event"]  # lifecycle events interleave
    assert turn_entries[-1].kind == "step" and turn_entries[-1].data["status"] == "final"
    assert [e.data["type"] for e in entries if e.kind == "event"][-1] == "task.finished"


async def read_until_finished(backend: StreamBackend, task_id: str, chain: str) -> list[StreamEntry]:
    """The whole stream once ``task.finished`` is in it. Events reach the stream from the worker's
    tap thread (activities/stores/live_events.py), so the last one can land a moment after the
    client has the task's result: a reader following the stream waits for it."""

    def finished() -> list[StreamEntry] | None:
        entries = backend.read(task_id, chain, 0, 10_000)
        return (
            entries if any(e.kind == "event" and e.data["type"] == "task.finished" for e in entries) else None
        )

    return await until(finished, 10, "task.finished in the stream")


@contextlib.asynccontextmanager
async def served(env: TaskEnv) -> AsyncIterator[str]:
    """The HTTP API over ``env`` (with its stream backend) on a real loopback server; its URL."""
    auth = Authenticator("token", {LEAD: "finance-lead", STRANGER: "mallory", OTHER: "globex-lead"})
    config = ApiConfig(
        auth=auth,
        task_queue=env.task_queue,
        tenants={"finance-lead": ["acme"], "mallory": ["acme"], "globex-lead": ["globex"]},
        streams=backend_of(env),
    )
    async with serving(build_api(env.client, config), "127.0.0.1:0") as url:
        yield url


async def read_sse(
    http: httpx.AsyncClient, task_id: str, last_id: int | None, stop_after_tokens: int | None
) -> list[tuple[str, int | None, str]]:
    """(event, id, data) per frame, until the ``end`` frame, or until ``stop_after_tokens`` token
    frames (then the connection is dropped, as a reader that goes away mid-turn does)."""
    headers = {"Authorization": f"Bearer {LEAD}"} | ({"Last-Event-ID": str(last_id)} if last_id else {})
    frames: list[tuple[str, int | None, str]] = []
    async with http.stream("GET", f"/v1/tasks/{task_id}/stream", headers=headers) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        kind, ident, data = "", None, ""
        async for line in reply.aiter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "" and kind:
                frames.append((kind, ident, data))
                if kind == "end":
                    break
                if stop_after_tokens and sum(f[0] == "token" for f in frames) >= stop_after_tokens:
                    break
                kind, ident, data = "", None, ""
    return frames


async def test_a_reader_that_disconnects_mid_turn_resumes_with_last_event_id_without_gap_or_repeat(
    openai_env: TaskEnv, stub: OpenAIStub
) -> None:
    """Over HTTP: the reader drops the connection after 5 token frames, while the turn still runs;
    reconnecting with ``Last-Event-ID`` it gets the entries after that id, each once, to the end:
    both reads together are offsets 1..N of the stored stream, and their text is the output. A
    stranger and a principal of another tenant get 404; no token gets 401."""
    stub.reply_text(ANSWER, chunk_delay=0.08)
    handle = await openai_env.start(SPEC)
    async with served(openai_env) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        for token, status in ((STRANGER, 404), (OTHER, 404), (None, 401)):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            assert (await http.get(f"/v1/tasks/{handle.id}/stream", headers=headers)).status_code == status
        first = await read_sse(http, handle.id, None, stop_after_tokens=5)
        assert not await turn_completed(handle), "the reader was not disconnected mid-turn"
        last_id = first[-1][1]
        assert last_id is not None
        rest = await read_sse(http, handle.id, last_id, None)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert rest[-1][0] == "end" and not any(kind == "gap" for kind, _, _ in first + rest)
    ids = [ident for _, ident, _ in first + rest if ident is not None]
    assert ids == list(range(1, len(ids) + 1)), "a gap or a repeat across the reconnect"
    stored = await asyncio.to_thread(
        backend_of(openai_env).read, handle.id, await chain_of(handle), 0, 10_000
    )
    assert ids == [e.offset for e in stored]
    entries = [StreamEntry.model_validate_json(data) for kind, _, data in first + rest if kind != "end"]
    assert assemble_text(entries) == result.final_output == ANSWER


class TimedOut:
    """A text sink that remembers when each piece was written."""

    def __init__(self) -> None:
        self.parts: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.parts.append((time.monotonic(), text))
        return len(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return "".join(t for _, t in self.parts)


async def test_events_follow_shows_the_text_and_steps_as_they_come(
    openai_env: TaskEnv, stub: OpenAIStub
) -> None:
    """`agent-worker events ID --follow` prints the model's words while the turn still runs (the
    first well before the last), then the turn's steps and the task's end, with the whole answer
    in between."""
    stub.reply_text(ANSWER, chunk_delay=0.08)
    handle = await openai_env.start(SPEC)
    out = TimedOut()
    ctx = CliContext(config=openai_env.config, address=openai_env.address)
    args = argparse.Namespace(task_id=handle.id, follow=True, json=False)
    assert await asyncio.wait_for(cmd_events(args, ctx, out), 60) == 0  # type: ignore[arg-type]
    text = out.text()
    # Event and step lines have their own lines; between them, the model's text as it came.
    lines = text.split("\n")
    prose = "".join(line for line in lines if not re.match(r"\s+(seq|\d+\s+\d{4}-|~ )", line))
    assert prose.strip() == ANSWER, text
    assert text.index("~ turn 1 turn.started") < text.index("The ") < text.index("~ turn 1 turn.finished")
    assert text.index("~ turn 1 turn.finished") < text.rindex("task.finished")
    words = [at for at, piece in out.parts if piece.strip() and piece.strip() in ANSWER.split()]
    assert len(words) > 20 and words[-1] - words[0] > 1.5, "the words arrived all at once"
