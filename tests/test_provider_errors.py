"""Model-provider failures, classified for Temporal: the real Agents SDK OpenAI Responses model and
``openai`` client against a local stub server, no network and no Temporal server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import openai
import pytest
from agent_worker.activities.agent.provider_errors import (
    MAX_RETRY_AFTER,
    REJECTED,
    RETRYABLE,
    UNAVAILABLE,
    no_sdk_retries,
    provider_failure,
)
from agents import Agent, ModelSettings, RunConfig, Runner
from agents.exceptions import ModelBehaviorError, ModelTimeoutError
from agents.models.openai_provider import OpenAIProvider
from openai import AsyncOpenAI
from openai.types.responses import Response
from temporalio.exceptions import ApplicationError

from tests.helpers.openai_stub import OpenAIStub, response_json


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


async def _run(
    base_url: str,
    *,
    max_retries: int = 0,
    client_timeout: float | None = None,
    model_settings: ModelSettings | None = None,
) -> Any:
    options: dict[str, Any] = {} if client_timeout is None else {"timeout": client_timeout}
    client = AsyncOpenAI(api_key="test", base_url=base_url, max_retries=max_retries, **options)
    model = OpenAIProvider(openai_client=client).get_model("gpt-test")
    run_config = RunConfig(model=model, tracing_disabled=True, model_settings=model_settings)
    result = await Runner.run(Agent(name="a", instructions="x"), "hi", run_config=run_config)
    return result.final_output


async def _failure(base_url: str, **kwargs: Any) -> tuple[BaseException, ApplicationError]:
    """What ``Runner.run`` raised, and what it classifies as (it must be a provider failure)."""
    with pytest.raises(Exception) as caught:
        await _run(base_url, **kwargs)
    failure = provider_failure(caught.value)
    assert failure is not None, f"not classified: {caught.value!r}"
    return caught.value, failure


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_stub_reply_is_a_valid_responses_object() -> None:
    """The stub's 200 body passes strict validation as an ``openai`` ``Response``, not just lax parsing."""
    response = Response.model_validate(response_json("forty-two"))
    assert response.output_text == "forty-two"
    assert response.usage is not None and response.usage.total_tokens == 6


async def test_a_200_reply_becomes_the_final_output(stub: OpenAIStub) -> None:
    """A successful reply parses into the run's final output, from one POST to /v1/responses."""
    stub.reply_text("the answer is 42")
    assert await _run(stub.base_url) == "the answer is 42"
    [request] = stub.requests
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.body["model"] == "gpt-test"
    assert request.body["instructions"] == "x"
    assert request.body["input"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("status", "raised"),
    [
        (408, openai.APIStatusError),
        (409, openai.ConflictError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
async def test_transient_statuses_are_retryable(
    stub: OpenAIStub, status: int, raised: type[openai.APIStatusError]
) -> None:
    """408, 409, 429 and 5xx retry in Temporal, after exactly one HTTP request (no hidden retries)."""
    stub.reply_error(status, "try again later", code="busy")
    err, failure = await _failure(stub.base_url)
    assert type(err) is raised
    assert (failure.type, failure.non_retryable) == (RETRYABLE, False)
    assert failure.next_retry_delay is None
    assert failure.details[0]["status_code"] == status
    assert failure.details[0]["provider_code"] == "busy"
    assert f"HTTP {status}: try again later" in failure.message
    assert len(stub.requests) == 1


@pytest.mark.parametrize(
    ("status", "raised"),
    [(400, openai.BadRequestError), (401, openai.AuthenticationError), (404, openai.NotFoundError)],
)
async def test_other_client_errors_are_rejected(
    stub: OpenAIStub, status: int, raised: type[openai.APIStatusError]
) -> None:
    """Other 4xx fail for good, naming the status and the provider's message, after one request."""
    stub.reply_error(status, f"provider says no ({status})")
    err, failure = await _failure(stub.base_url)
    assert type(err) is raised
    assert (failure.type, failure.non_retryable) == (REJECTED, True)
    assert f"HTTP {status}: provider says no ({status})" in failure.message
    assert failure.details[0]["status_code"] == status
    assert len(stub.requests) == 1


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"Retry-After": "2"}, timedelta(seconds=2)),
        ({"retry-after-ms": "1500", "Retry-After": "9"}, timedelta(milliseconds=1500)),
        ({"Retry-After": "86400"}, MAX_RETRY_AFTER),
        ({"Retry-After": "soon"}, None),
    ],
)
async def test_retry_after_sets_the_next_retry_delay(
    stub: OpenAIStub, headers: dict[str, str], delay: timedelta | None
) -> None:
    """A 429's retry-after-ms (preferred) or Retry-After becomes the next retry's delay, capped."""
    stub.reply_error(429, "slow down", headers=headers)
    err, failure = await _failure(stub.base_url)
    assert isinstance(err, openai.RateLimitError)
    assert (failure.type, failure.non_retryable) == (RETRYABLE, False)
    assert failure.next_retry_delay == delay
    assert len(stub.requests) == 1


async def test_retry_after_as_an_http_date(stub: OpenAIStub) -> None:
    """A Retry-After date is the time left until then."""
    when = datetime.now(UTC) + timedelta(seconds=30)
    stub.reply_error(503, "maintenance", headers={"Retry-After": format_datetime(when, usegmt=True)})
    _, failure = await _failure(stub.base_url)
    assert failure.next_retry_delay is not None
    assert timedelta(seconds=27) <= failure.next_retry_delay <= timedelta(seconds=30)


@pytest.mark.parametrize(
    ("status", "header", "code", "non_retryable"),
    [(503, "false", REJECTED, True), (429, "false", REJECTED, True), (400, "true", RETRYABLE, False)],
)
async def test_x_should_retry_overrides_the_status(
    stub: OpenAIStub, status: int, header: str, code: str, non_retryable: bool
) -> None:
    """The provider's ``x-should-retry`` header wins over the status code, both ways."""
    stub.reply_error(status, "as the header says", headers={"x-should-retry": header})
    _, failure = await _failure(stub.base_url)
    assert (failure.type, failure.non_retryable) == (code, non_retryable)
    assert len(stub.requests) == 1


async def test_connection_refused_is_unavailable() -> None:
    """Nothing listening on the port is a retryable ``model_provider_unavailable``."""
    err, failure = await _failure(f"http://127.0.0.1:{_closed_port()}/v1")
    assert type(err) is openai.APIConnectionError
    assert (failure.type, failure.non_retryable) == (UNAVAILABLE, False)
    assert failure.details[0]["status_code"] is None
    assert "ConnectError" in failure.message


@pytest.mark.parametrize(
    ("kwargs", "raised"),
    [
        ({"client_timeout": 0.2}, openai.APITimeoutError),
        ({"model_settings": ModelSettings(timeout=0.2)}, ModelTimeoutError),
    ],
)
async def test_timeouts_are_unavailable(
    stub: OpenAIStub, kwargs: dict[str, Any], raised: type[Exception]
) -> None:
    """A reply slower than the client's or the SDK's timeout is retryable and unavailable, one request."""
    stub.reply_text("too late", delay=2.0)
    err, failure = await _failure(stub.base_url, **kwargs)
    assert type(err) is raised
    assert (failure.type, failure.non_retryable) == (UNAVAILABLE, False)
    assert len(stub.requests) == 1


async def test_stub_counts_a_clients_own_retries(stub: OpenAIStub) -> None:
    """With client retries on, the stub sees two requests: so the one-request assertions can fail."""
    stub.reply_error(500, "blip", headers={"retry-after-ms": "10"})
    stub.reply_text("recovered")
    assert await _run(stub.base_url, max_retries=1) == "recovered"
    assert len(stub.requests) == 2


async def test_no_sdk_retries_stops_the_sdks_default_conversation_locked_retry(stub: OpenAIStub) -> None:
    """The SDK re-sends a 400 ``conversation_locked`` by default; ``no_sdk_retries()`` sends it once."""
    stub.reply_error(400, "conversation is locked", code="conversation_locked")
    stub.reply_text("sent twice")
    assert await _run(stub.base_url) == "sent twice"
    assert len(stub.requests) == 2

    stub.reply_error(400, "conversation is locked", code="conversation_locked")
    err, failure = await _failure(stub.base_url, model_settings=no_sdk_retries())
    assert isinstance(err, openai.BadRequestError)
    assert (failure.type, failure.non_retryable) == (REJECTED, True)
    assert len(stub.requests) == 3


async def test_wrapped_provider_errors_are_unwrapped(stub: OpenAIStub) -> None:
    """A provider error raised as the ``__cause__`` of another exception is classified as itself."""
    stub.reply_error(429, "slow down", headers={"Retry-After": "3"})
    with pytest.raises(openai.RateLimitError) as caught:
        await _run(stub.base_url)
    try:
        raise RuntimeError("turn failed") from caught.value
    except RuntimeError as wrapper:
        failure = provider_failure(wrapper)
    assert failure is not None
    assert (failure.type, failure.next_retry_delay) == (RETRYABLE, timedelta(seconds=3))


async def test_other_errors_are_left_to_the_caller(stub: OpenAIStub) -> None:
    """Errors that are not the provider's (a response the provider marked failed, a bug) give None."""
    stub.reply(200, body={**response_json("half"), "status": "failed"})
    with pytest.raises(ModelBehaviorError) as caught:
        await _run(stub.base_url)
    assert provider_failure(caught.value) is None
    assert provider_failure(ValueError("bug")) is None
