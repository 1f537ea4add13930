"""A model server that does not stream: it answers ``stream: true`` with an HTTP 400 (or 422), as
many OpenAI-compatible servers do. The call falls back to one unstreamed request, that model is not
streamed again in the worker process, the fallback is logged once, and the task completes; a 400
that the unstreamed request gets too is a bad request that fails, after two requests.

Real parts: the project's OpenAI-compatible server (tests/helpers/openai_stub.py) on loopback, the
real ``openai`` client and the Agents SDK's Responses and Chat Completions models, a worker in its
own process (``agent-worker worker``) and the real Temporal dev server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import structlog
from agent_worker.activities.agent import streaming
from agent_worker.activities.agent.provider_errors import REJECTED, provider_failure
from agent_worker.activities.agent.providers import resolve_chain
from agent_worker.activities.agent.registry import AgentRegistration
from agent_worker.activities.agent.streaming import StreamingModel, TurnStream, response_text
from agent_worker.activities.stores.state import build_stream_backend
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.streams import assemble_text
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agents import Agent, ModelSettings
from agents.models.interface import ModelTracing

from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import TaskEnv, spawn_worker, stop_worker

ANSWER = "Revenue rose in the north and west; the south was flat."
FALLBACK = "model server does not stream"
APIS = [("responses", "/v1/responses"), ("chat_completions", "/v1/chat/completions")]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def _fallback_lines(log: Path) -> list[dict[str, Any]]:
    """The worker's JSON log lines that say it stopped streaming a model."""
    lines = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and FALLBACK in str(record.get("event", "")):
            lines.append(record)
    return lines


@pytest.mark.parametrize(("api", "path"), APIS)
async def test_a_server_that_refuses_to_stream_still_completes_tasks_and_is_not_streamed_again(
    config_env: TaskEnv, tmp_path: Path, stub: OpenAIStub, api: str, path: str
) -> None:
    """A worker process on a server that answers 400 to every streamed request: the first task's call
    is refused once and asked again unstreamed, the task completes with the server's answer (which
    the live stream carries whole), the worker logs one fallback naming the model and the server's
    words, and the next task's call goes unstreamed at once (one request, no stream)."""
    stub.refuse_stream(400, "Streaming is not supported by this server")
    stub.always(text=ANSWER)
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        config_env,
        log,
        AGENT_WORKER_MODEL_PROVIDER="auto",
        AGENT_WORKER_LOG_FORMAT="json",
        OPENAI_BASE_URL=stub.base_url,
        AGENT_WORKER_OPENAI_MODEL="qwen-local",
        AGENT_WORKER_OPENAI_API=api,
    )
    try:
        first = await config_env.start({"agent": "plain", "prompt": "how did the quarter go?"})
        result: TaskResult = await asyncio.wait_for(first.result(), 120)
        assert result.phase is TaskPhase.COMPLETED and result.final_output == ANSWER
        assert stub.streamed() == [True, False] and stub.paths() == [path, path]
        second = await config_env.start({"agent": "plain", "prompt": "and the next one?"})
        again: TaskResult = await asyncio.wait_for(second.result(), 120)
        assert again.phase is TaskPhase.COMPLETED and again.final_output == ANSWER
        assert stub.streamed() == [True, False, False]
    finally:
        await asyncio.to_thread(stop_worker, worker)
    [logged] = _fallback_lines(log)
    assert logged["level"] == "warning"
    assert logged["model"] == f"openai:qwen-local@{stub.base_url}"
    assert logged["answer"] == "HTTP 400: Streaming is not supported by this server"
    backend = build_stream_backend(config_env.config)
    assert backend is not None
    chain = (await first.describe()).raw_description.workflow_execution_info.first_run_id
    entries = await asyncio.to_thread(backend.read, first.id, chain, 0, 10_000)
    assert assemble_text(entries) == ANSWER


def _streaming_model(stub: OpenAIStub, api: str) -> StreamingModel:
    """The first model of a chain on ``stub``, wrapped to answer through its stream."""
    config = WorkerConfig.from_env(
        {"AGENT_WORKER_PROVIDERS": json.dumps({"local": {"base_url": stub.base_url, "api": api}})}
    )
    registration = AgentRegistration(
        name="direct", build=lambda: Agent(name="direct", instructions="Answer."), model="local/m-1"
    )
    [choice] = resolve_chain(registration, registration.build(), config)
    return StreamingModel(choice.model, TurnStream(None, f"t-{os.urandom(4).hex()}", None, 1), choice.label)


@contextlib.contextmanager
def streaming_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """What the streaming module logs meanwhile. Its module logger was cached on first use (the
    worker's logging caches loggers) by whichever earlier test logged through it, and a cached
    logger escapes ``capture_logs``: a fresh one, bound inside the capture, does not."""
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(streaming, "log", structlog.get_logger(streaming.__name__))
        yield logs


async def _call(model: StreamingModel) -> str:
    response = await model.get_response(
        None, "say hello", ModelSettings(), [], None, [], ModelTracing.DISABLED
    )
    return response_text(response)


@pytest.mark.parametrize(
    ("status", "words"),
    [(400, "unsupported parameter"), (422, "body.stream: extra inputs are not permitted")],
)
@pytest.mark.parametrize(("api", "path"), APIS)
async def test_a_refusal_with_or_without_the_word_stream_falls_back_once(
    stub: OpenAIStub, api: str, path: str, status: int, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 400 that does not say why, and a 422 that names `stream`, to a streamed request: the same
    request unstreamed answers, one warning is logged, and the next call of that model does not
    stream."""
    stub.refuse_stream(status, words)
    stub.always(text=ANSWER)
    model = _streaming_model(stub, api)
    with streaming_logs(monkeypatch) as logs:
        assert await _call(model) == ANSWER
        assert await _call(model) == ANSWER
    assert stub.streamed() == [True, False, False]
    [warning] = [e for e in logs if FALLBACK in e["event"]]
    assert warning["model"] == model.label and warning["answer"] == f"HTTP {status}: {words}"


@pytest.mark.parametrize(("api", "path"), APIS)
async def test_a_bad_request_fails_after_two_requests_and_the_model_keeps_streaming(
    stub: OpenAIStub, api: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 400 that the unstreamed request gets as well is the request's own fault: the call fails with
    the server's second answer (a non-retryable rejection), after exactly two requests, nothing is
    logged as a fallback, and the model's next call streams again."""
    stub.reply_error(400, "context length exceeded (stream)")
    stub.reply_error(400, "context length exceeded")
    stub.reply_text(ANSWER)
    model = _streaming_model(stub, api)
    with streaming_logs(monkeypatch) as logs:
        with pytest.raises(openai.BadRequestError) as caught:
            await _call(model)
        assert await _call(model) == ANSWER
    assert stub.streamed() == [True, False, True]
    failure = provider_failure(caught.value)
    assert failure is not None and failure.type == REJECTED and failure.non_retryable
    assert "context length exceeded" in failure.message
    assert not [e for e in logs if FALLBACK in e["event"]]


@pytest.mark.parametrize(("api", "path"), APIS)
async def test_a_server_that_ignores_stream_is_asked_once_more_and_not_streamed_again(
    stub: OpenAIStub, api: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that answers a streamed request with a plain JSON body (no stream event): the same
    request unstreamed answers, one warning is logged, and the next call does not stream."""
    stub.ignore_stream()
    stub.always(text=ANSWER)
    model = _streaming_model(stub, api)
    with streaming_logs(monkeypatch) as logs:
        assert await _call(model) == ANSWER
        assert await _call(model) == ANSWER
    assert stub.streamed() == [True, False, False]
    [warning] = [e for e in logs if FALLBACK in e["event"]]
    assert warning["answer"] == "a reply with no stream events"


async def test_a_422_about_something_else_is_not_taken_for_a_refused_stream(stub: OpenAIStub) -> None:
    """A 422 that does not mention `stream` is raised as it came, after one request."""
    stub.reply_error(422, "temperature: must be at most 2")
    model = _streaming_model(stub, "chat_completions")
    with pytest.raises(openai.UnprocessableEntityError):
        await _call(model)
    assert stub.streamed() == [True]
