"""Traces on a real dev server: a task is one OpenTelemetry trace, from the client's start through the
workflow and its activities down to the Agents SDK's model calls and tools; replay exports nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.artifacts import ArtifactActivities, LocalArtifactStore
from agent_worker.activities.events import EventActivities, JsonlEventSink
from agent_worker.activities.sandbox import SandboxHere
from agent_worker.activities.tenants import TenantActivities, TenantAdmission
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.telemetry import configure_tracing, tracing_interceptors
from agent_worker.workflows import AgentTaskWorkflow
from agents.tracing import set_trace_processors
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from tests.helpers.openai_stub import OpenAIStub, response_json
from tests.helpers.support import DevServer, TaskEnv, example_spec, make_config, running_worker


@dataclass
class Tracing:
    """A tracer provider exporting to memory."""

    provider: ReplaySafeTracerProvider
    exporter: InMemorySpanExporter

    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every span ended so far (the batch processor flushed first)."""
        assert self.provider.force_flush()
        return self.exporter.get_finished_spans()


@pytest.fixture
def tracing() -> Iterator[Tracing]:
    exporter = InMemorySpanExporter()
    provider = configure_tracing(endpoint=None, exporter=exporter)
    assert provider is not None
    yield Tracing(provider, exporter)
    # The Agents SDK's processors are process-wide: leave none behind for other tests.
    set_trace_processors([])
    provider.shutdown()


@pytest.fixture
async def traced_client(dev_server: DevServer, tracing: Tracing) -> Client:
    return await Client.connect(
        dev_server.address,
        data_converter=pydantic_data_converter,
        interceptors=tracing_interceptors(tracing.provider),
    )


def traced_config(tmp_path: Path, **overrides: Any) -> WorkerConfig:
    # agents_tracing keeps worker.py and the turn from switching the Agents SDK's tracing off; the
    # fixture's configure_tracing already replaced the SDK's export to OpenAI.
    return make_config(tmp_path / "data", agents_tracing=True, **overrides)


async def run_monthly_report(env: TaskEnv, client: Client) -> WorkflowHandle[Any, TaskResult]:
    """Start the example with ``env``'s (traced) client and approve it through ``client``, as a person
    would from the UI or CLI: with no span context of their own."""
    started = await env.start(example_spec())
    handle = client.get_workflow_handle(started.id, result_type=TaskResult)
    [request] = (await env.awaiting_approval(handle)).pending
    await handle.execute_update(
        AgentTaskWorkflow.decide,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "approve",
            "principal": "finance-lead",
        },
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    return handle


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    """The names of ``span``'s ancestors, nearest first."""
    names = []
    while span.parent is not None:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


def assert_one_tree(spans: Sequence[ReadableSpan]) -> dict[int, ReadableSpan]:
    """One trace, one root (the client's start), every parent present; returns spans by id."""
    assert len({s.context.trace_id for s in spans}) == 1
    by_id = {s.context.span_id: s for s in spans}
    assert len(by_id) == len(spans)
    assert [s.name for s in spans if s.parent is None] == ["StartWorkflow:AgentTask"]
    orphans = [s.name for s in spans if s.parent is not None and s.parent.span_id not in by_id]
    assert orphans == []
    return by_id


async def test_a_task_is_one_trace_from_its_start_to_each_model_call_tool_and_write(
    traced_client: Client, client: Client, dev_server: DevServer, tracing: Tracing, tmp_path: Path
) -> None:
    """The monthly report, approved, exports one connected tree rooted at the client's StartWorkflow:
    workflow spans, every activity, and under each agent.turn the Agents SDK's run, agent, model-call
    turns (with their token usage, summing to the task's) and tool calls."""
    env = TaskEnv(client=traced_client, config=traced_config(tmp_path), address=dev_server.address)
    async with running_worker(traced_client, env.config):
        handle = await run_monthly_report(env, client)
    result = await handle.result()

    spans = tracing.spans()
    by_id = assert_one_tree(spans)
    names = {s.name for s in spans}
    assert {
        "RunWorkflow:AgentTask",
        "StartActivity:agent.turn",
        "RunActivity:agent.turn",
        "RunActivity:sandbox.exec",
        "RunActivity:business.write",
        "HandleUpdate:decide",
        "CompleteWorkflow:AgentTask",
    } <= names
    turns = [s for s in spans if s.name == "RunActivity:agent.turn"]
    assert len(turns) == result.usage.turns

    # The Agents SDK's turns: one model call each, under an agent, under a run, under agent.turn.
    model_calls = [s for s in spans if s.name == "agents.turn"]
    assert len(model_calls) == result.usage.model_calls > 0
    for span in model_calls:
        assert ancestors(span, by_id)[:3] == [
            "invoke_agent monthly-report",
            "agents.run",
            "RunActivity:agent.turn",
        ]
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in model_calls) == result.usage.input_tokens
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in model_calls) == result.usage.output_tokens
    [draft] = [s for s in spans if s.name == "execute_tool draft_report"]
    assert draft.attributes["gen_ai.tool.name"] == "draft_report"
    assert ancestors(draft, by_id)[:2] == ["agents.turn", "invoke_agent monthly-report"]
    assert "RunActivity:agent.turn" in ancestors(draft, by_id)


async def test_replaying_a_finished_task_exports_no_spans(
    traced_client: Client, client: Client, dev_server: DevServer, tracing: Tracing, tmp_path: Path
) -> None:
    """A cache-less worker that replays the whole finished history to answer a query, and the
    Replayer, export no span; a traced query adds only its own two spans, in a trace of its own."""
    env = TaskEnv(client=traced_client, config=traced_config(tmp_path), address=dev_server.address)
    async with running_worker(traced_client, env.config):
        handle = await run_monthly_report(env, client)
    before = tracing.spans()
    assert_one_tree(before)

    # A fresh worker keeping no workflow in cache must replay all of the history for every task. Local
    # activities (admission, ingest, event delivery, the sandbox's destroy) are resolved from their
    # markers, but must be registered.
    tenants = TenantActivities(TenantAdmission(tmp_path / "admission.db", {}, traced_client))
    artifacts = ArtifactActivities(LocalArtifactStore(tmp_path / "unused-artifacts"))
    events = EventActivities(JsonlEventSink(tmp_path / "unused-events"))
    async with Worker(
        traced_client,
        task_queue=env.task_queue,
        workflows=[AgentTaskWorkflow],
        activities=[
            tenants.admit,
            tenants.release,
            artifacts.ingest,
            events.publish,
            events.publish_here,
            SandboxHere(None).destroy_here,
        ],
        max_cached_workflows=0,
    ):
        status = await handle.query(AgentTaskWorkflow.status)
        assert status.phase is TaskPhase.COMPLETED
        assert tracing.spans() == before

        traced = traced_client.get_workflow_handle(handle.id)
        assert (await traced.query(AgentTaskWorkflow.status)).phase is TaskPhase.COMPLETED
    added = tracing.spans()[len(before) :]
    assert sorted(s.name for s in added) == ["HandleQuery:status", "QueryWorkflow:status"]
    [query_trace] = {s.context.trace_id for s in added}
    assert query_trace != before[0].context.trace_id

    history = await handle.fetch_history()
    replayer = Replayer(
        workflows=[AgentTaskWorkflow],
        data_converter=pydantic_data_converter,
        interceptors=tracing_interceptors(tracing.provider),
    )
    await replayer.replay_workflow(history)
    assert len(tracing.spans()) == len(before) + 2


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


@pytest.fixture
async def openai_env(
    traced_client: Client, dev_server: DevServer, stub: OpenAIStub, tmp_path: Path
) -> AsyncIterator[TaskEnv]:
    config = traced_config(
        tmp_path,
        **stub.settings(),
    )
    async with running_worker(traced_client, config):
        yield TaskEnv(client=traced_client, config=config, address=dev_server.address)


async def test_a_model_call_span_carries_the_model_and_its_token_usage(
    openai_env: TaskEnv, stub: OpenAIStub, tracing: Tracing
) -> None:
    """Through the Agents SDK's real OpenAI Responses model (against a local stub), the model call is a
    `chat gpt-test` client span under agent.turn, with the model, response id and token usage."""
    stub.reply(body=response_json("hello from the provider", model="gpt-test", response_id="resp_1"))
    handle = await openai_env.start({"agent": "plain", "prompt": "say hello"})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED

    spans = tracing.spans()
    by_id = assert_one_tree(spans)
    [call] = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert call.name == "chat gpt-test"
    assert call.kind.name == "CLIENT"
    assert ancestors(call, by_id)[:4] == [
        "agents.turn",
        "invoke_agent plain",
        "agents.run",
        "RunActivity:agent.turn",
    ]
    expected = {
        "gen_ai.response.model": "gpt-test",
        "gen_ai.response.id": "resp_1",
        "gen_ai.usage.input_tokens": 5,
        "gen_ai.usage.output_tokens": 4,
    }
    assert {key: call.attributes.get(key) for key in expected} == expected
    assert (result.usage.input_tokens, result.usage.output_tokens) == (5, 4)
