"""A model whose stream breaks off mid-answer: its words so far are marked superseded before the
fallback model of the agent's chain answers, so the reader's assembled text is the fallback's answer
alone, which is the task's output."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_worker.activities.agent.registry import AgentRegistration
from agent_worker.activities.stores.state import build_stream_backend
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.streams import assemble_text, voided
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agents import Agent

from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import DevServer, TaskEnv, running_worker

FIRST = "Revenue rose in every region except the south, where a late shipment moved sales"
ANSWER = "Revenue rose in the north and west; the south was flat."

# Loaded by import path, as a user's module would be.
RESILIENT = [
    AgentRegistration(
        name="resilient-streamer",
        build=lambda: Agent(name="resilient-streamer", instructions="Answer briefly."),
        model="primary/model-1",
        fallback=["backup/model-2"],
    )
]


@pytest.fixture
def stubs() -> Iterator[tuple[OpenAIStub, OpenAIStub]]:
    with OpenAIStub() as primary, OpenAIStub() as backup:
        yield primary, backup


@pytest.mark.parametrize("torn", [False, True], ids=["ended-early", "torn-mid-body"])
async def test_a_model_that_breaks_off_mid_stream_is_superseded_before_the_fallback_answers(
    client, dev_server: DevServer, tmp_path: Path, stubs: tuple[OpenAIStub, OpenAIStub], torn: bool
) -> None:
    """The primary streams 6 chunks (a few words) and drops the connection, either ending the body
    early or tearing it (the openai client's transport raises): that is an outage, the backup
    answers the same call; the stream has the primary's words, then a superseded entry naming the
    call and the primary, then the backup's words; the assembled text is the output."""
    primary, backup = stubs
    primary.reply_text(FIRST, chunk_delay=0.05, cut_after=6, torn=torn)
    backup.reply_text(ANSWER, chunk_delay=0.02)
    providers = (
        f'{{"primary": {{"base_url": "{primary.base_url}"}}, "backup": {{"base_url": "{backup.base_url}"}}}}'
    )
    config = WorkerConfig.from_env(
        {"AGENT_WORKER_PROVIDERS": providers},
        task_queue=f"tq-stream-fallback-{os.urandom(4).hex()}",
        data_dir=tmp_path / "data",
        agents=["tests.test_stream_fallback:RESILIENT"],
        sandbox_backend="process",
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        handle = await env.start({"agent": "resilient-streamer", "prompt": "how did the quarter go?"})
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and result.final_output == ANSWER
    assert len(primary.requests) == 1 and len(backup.requests) == 1
    backend = build_stream_backend(config)
    assert backend is not None
    chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
    entries = await asyncio.to_thread(backend.read, handle.id, chain, 0, 10_000)
    [superseded] = [e for e in entries if e.kind == "superseded"]
    assert superseded.data["call"] == 0 and superseded.data["model"].startswith("primary:model-1")
    before = [e for e in entries if e.kind == "token" and e.offset < superseded.offset]
    after = [e for e in entries if e.kind == "token" and e.offset > superseded.offset]
    cut = "".join(e.data["text"] for e in before)
    assert cut and FIRST.startswith(cut) and len(cut) < len(FIRST)
    assert "".join(e.data["text"] for e in after) == ANSWER
    assert {e.offset for e in before} <= voided(entries)
    assert assemble_text(entries) == result.final_output
