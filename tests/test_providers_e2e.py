"""A real OpenAI-shaped HTTP server behind a task: Temporal owns the retries, honouring Retry-After;
a request the provider refuses fails the task at once, explained."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import WorkflowFailureError

from tests.helpers.matrix import Record, leftover_sandboxes, record
from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import DevServer, TaskEnv, assert_replays, make_config, running_worker


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


async def test_retryable_errors_are_retried_by_temporal_honouring_retry_after(
    openai_env: TaskEnv, stub: OpenAIStub, record_property: Record
) -> None:
    """429 (Retry-After: 3) and 500 are retried by the turn activity; the third answer completes the
    task; the provider saw exactly three requests, the first retry no sooner than asked."""
    stub.reply_error(429, "slow down", headers={"Retry-After": "3"})
    stub.reply_error(500, "upstream hiccup")
    stub.reply_text("hello from the provider")
    handle = await openai_env.start({"agent": "plain", "prompt": "say hello"})
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    assert result.final_output == "hello from the provider"
    assert result.usage.model == f"openai:gpt-test@{stub.base_url}"
    assert [r.path for r in stub.requests] == ["/v1/responses"] * 3
    gap = stub.requests[1].at - stub.requests[0].at
    assert gap >= 3.0, f"retried after {gap:.2f} s, sooner than Retry-After"
    status = await handle.query(AgentTaskWorkflow.status)
    assert any(
        e.data.get("model") == result.usage.model
        for e in status.last_events
        if e.type.value == "turn.finished"
    )
    await assert_replays(openai_env.client, handle.id)
    record(
        record_property,
        observed=f"429 then 500 retried (first retry after {gap:.1f} s, Retry-After 3); completed",
        duplicates=0,
        lost=0,
        leftover=leftover_sandboxes(openai_env.config, [handle.id]),
    )


@pytest.mark.parametrize(
    ("status", "code", "words"),
    [(400, None, "HTTP 400: bad tool schema"), (429, "insufficient_quota", "HTTP 429: out of credit")],
)
async def test_refused_requests_fail_the_task_without_retry(
    openai_env: TaskEnv, stub: OpenAIStub, status: int, code: str | None, words: str, record_property: Record
) -> None:
    """A 400 (or a 429 for exhausted quota) is not retried: the task ends failed with the provider's
    message. A 429 takes one request; a 400 to the streamed request takes one more, unstreamed (a
    server that does not stream would answer that one, docs/models.md#streaming), and no other."""
    message = words.split(": ", 1)[1]
    stub.reply_error(status, message, code=code)
    if status == 400:
        stub.reply_error(status, message, code=code)
    handle = await openai_env.start({"agent": "plain", "prompt": "say hello"})
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 60)
    assert stub.streamed() == ([True, False] if status == 400 else [True])
    task_status = await handle.query(AgentTaskWorkflow.status)
    assert task_status.phase is TaskPhase.FAILED
    assert task_status.reason and words in task_status.reason
    record(
        record_property,
        observed=f"{status} {code or ''}: {len(stub.requests)} request(s) "
        f"({'streamed, then unstreamed' if status == 400 else 'streamed'}), failed with the message",
        duplicates=0,
        lost=0,
        leftover=leftover_sandboxes(openai_env.config, [handle.id]),
    )
