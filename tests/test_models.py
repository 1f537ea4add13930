"""Models per agent: providers by name, an agent's own model, fallback chains, the start check.

Real parts: the project's OpenAI-compatible server (tests/helpers/openai_stub.py, both APIs) on loopback,
the real Temporal dev server, the real ``openai`` client and Agents SDK models, and LiteLLM.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.agent.journal import JournaledModel, ModelCallJournal
from agent_worker.activities.agent.providers import ModelChain, check_models, fallback_reason, resolve_chain
from agent_worker.activities.agent.registry import AgentRegistration
from agent_worker.schemas.config import ConfigError, WorkerConfig
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.security.redact import config_secrets
from agent_worker.workflows import AgentTaskWorkflow
from agents import Agent, RunConfig, Runner

from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import (
    TEST_AGENTS,
    DevServer,
    TaskEnv,
    assert_replays,
    running_worker,
    spawn_worker,
)


def _agent(name: str, model: str | None = None) -> Agent[Any]:
    return Agent(name=name, instructions="Answer briefly.", model=model)


# Agents the tests load by import path, as a user's module would be.
TWO_AGENTS = [
    # Its registration names the model.
    AgentRegistration(name="alpha-agent", build=lambda: _agent("alpha-agent"), model="alpha/model-a"),
    # Its own Agent(model=...) names it: honoured, not overridden by the worker's default.
    AgentRegistration(name="beta-agent", build=lambda: _agent("beta-agent", "beta/model-b")),
]
RESILIENT = [
    AgentRegistration(
        name="resilient",
        build=lambda: _agent("resilient"),
        model="primary/model-1",
        fallback=["backup/model-2"],
    )
]
UNRESOLVABLE = [AgentRegistration(name="lost-agent", build=lambda: _agent("lost-agent", "nowhere/model-x"))]


@pytest.fixture
def stubs() -> Iterator[tuple[OpenAIStub, OpenAIStub]]:
    with OpenAIStub() as first, OpenAIStub() as second:
        yield first, second


def _config(tmp_path: Path, env: dict[str, str], **overrides: Any) -> WorkerConfig:
    """A worker config from environment variables alone (plus this test's queue and data dir)."""
    return WorkerConfig.from_env(
        env,
        task_queue=f"tq-models-{os.urandom(4).hex()}",
        data_dir=tmp_path / "data",
        agents=overrides.pop("agents", TEST_AGENTS),
        sandbox_backend="process",
        **overrides,
    )


async def _run(env: TaskEnv, agent: str) -> tuple[TaskResult, list[dict[str, Any]]]:
    """Run a task on ``agent`` to the end; its result and its turn.finished events' data."""
    handle = await env.start({"agent": agent, "prompt": "say hello"})
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    status = await handle.query(AgentTaskWorkflow.status)
    finished = [e.data for e in status.last_events if e.type.value == "turn.finished"]
    await assert_replays(env.client, handle.id)
    return result, finished


@pytest.mark.parametrize(
    ("api", "path"), [("chat_completions", "/v1/chat/completions"), ("responses", "/v1/responses")]
)
async def test_a_local_server_with_no_key_drives_a_task_on_the_api_the_config_selects(
    client, dev_server: DevServer, tmp_path: Path, stubs: tuple[OpenAIStub, OpenAIStub], api: str, path: str
) -> None:
    """OPENAI_BASE_URL, AGENT_WORKER_OPENAI_MODEL and AGENT_WORKER_OPENAI_API, no key, no provider
    setting: the task completes on the local server, through the API asked, and usage and the
    turn.finished event record provider, API and model."""
    stub, _ = stubs
    stub.reply_text("hello from the local server")
    config = _config(
        tmp_path,
        {
            "OPENAI_BASE_URL": stub.base_url,
            "AGENT_WORKER_OPENAI_MODEL": "qwen-local",
            "AGENT_WORKER_OPENAI_API": api,
        },
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        result, [finished] = await _run(env, "plain")
    assert result.phase is TaskPhase.COMPLETED
    assert result.final_output == "hello from the local server"
    assert stub.paths() == [path]
    assert stub.requests[0].body["model"] == "qwen-local"
    label = f"openai:qwen-local@{stub.base_url}"
    assert (result.usage.model, result.usage.provider, result.usage.api) == (label, "openai", api)
    assert (finished["model"], finished["provider"], finished["api"]) == (label, "openai", api)
    assert finished["calls"] == [
        {"model": label, "provider": "openai", "api": api, "replayed": False, "skipped": []}
    ]


async def test_two_agents_on_one_worker_use_their_own_models_and_providers(
    client, dev_server: DevServer, tmp_path: Path, stubs: tuple[OpenAIStub, OpenAIStub]
) -> None:
    """One worker, providers `alpha` (Responses) and `beta` (Chat Completions) from AGENT_WORKER_PROVIDERS:
    the agent whose registration names alpha/model-a is answered by alpha, the agent whose own Agent
    names beta/model-b by beta (the worker's default model is overridden by neither); usage and
    events record each."""
    alpha, beta = stubs
    alpha.reply_text("alpha answers")
    beta.reply_text("beta answers")
    providers = (
        f'{{"alpha": {{"base_url": "{alpha.base_url}"}}, '
        f'"beta": {{"base_url": "{beta.base_url}", "api": "chat_completions", "api_key": "beta-key-77"}}}}'
    )
    config = _config(
        tmp_path,
        {"AGENT_WORKER_PROVIDERS": providers, "AGENT_WORKER_OPENAI_MODEL": "default-m"},
        agents=["tests.test_models:TWO_AGENTS"],
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        (a, [a_event]), (b, [b_event]) = await asyncio.gather(
            _run(env, "alpha-agent"), _run(env, "beta-agent")
        )
    assert (a.final_output, b.final_output) == ("alpha answers", "beta answers")
    assert (alpha.paths(), beta.paths()) == (["/v1/responses"], ["/v1/chat/completions"])
    assert alpha.requests[0].body["model"] == "model-a" and beta.requests[0].body["model"] == "model-b"
    assert (a.usage.model, a.usage.provider, a.usage.api) == (
        f"alpha:model-a@{alpha.base_url}",
        "alpha",
        "responses",
    )
    assert (b.usage.model, b.usage.provider, b.usage.api) == (
        f"beta:model-b@{beta.base_url}",
        "beta",
        "chat_completions",
    )
    assert (a_event["provider"], a_event["api"]) == ("alpha", "responses")
    assert (b_event["provider"], b_event["api"]) == ("beta", "chat_completions")


@pytest.mark.parametrize(
    ("status", "code", "reason"),
    [(503, None, "outage: model provider failed: HTTP 503"), (429, "insufficient_quota", "quota: ")],
)
async def test_a_fallback_model_answers_when_the_first_provider_is_down_or_out_of_quota(
    client,
    dev_server: DevServer,
    tmp_path: Path,
    stubs: tuple[OpenAIStub, OpenAIStub],
    status: int,
    code: str | None,
    reason: str,
) -> None:
    """The first provider answers 503 (or 429 insufficient_quota) to every call: the task completes
    on the second model; each failing call reached the first provider once (no client retries), and
    the events say which model answered and why the first was skipped."""
    primary, backup = stubs
    primary.always(status, message="the primary is not serving", code=code)
    backup.always(text="the backup answers")
    config = _config(
        tmp_path,
        {
            "AGENT_WORKER_PROVIDER_PRIMARY_BASE_URL": primary.base_url,
            "AGENT_WORKER_PROVIDER_BACKUP_BASE_URL": backup.base_url,
            "AGENT_WORKER_PROVIDER_BACKUP_API": "chat_completions",
        },
        agents=["tests.test_models:RESILIENT"],
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        result, [finished] = await _run(env, "resilient")
    assert result.phase is TaskPhase.COMPLETED and result.final_output == "the backup answers"
    assert primary.paths() == ["/v1/responses"] and backup.paths() == ["/v1/chat/completions"]
    backup_label = f"backup:model-2@{backup.base_url}"
    assert result.usage.model == backup_label and finished["model"] == backup_label
    [call] = finished["calls"]
    assert (call["model"], call["provider"], call["api"]) == (backup_label, "backup", "chat_completions")
    [skipped] = call["skipped"]
    assert skipped["model"] == f"primary:model-1@{primary.base_url}"
    assert skipped["reason"].startswith(reason) and "the primary is not serving" in skipped["reason"]


async def test_a_retried_turn_replays_journaled_calls_with_the_model_that_answered_them(
    tmp_path: Path, stubs: tuple[OpenAIStub, OpenAIStub]
) -> None:
    """A call the fallback model answered is journaled with that record: the retried turn answers it
    from the journal (no request to either provider) and still says which model answered and why."""
    primary, backup = stubs
    primary.always(502, message="bad gateway")
    backup.reply_text("journaled answer")
    config = _config(
        tmp_path,
        {
            "AGENT_WORKER_PROVIDER_PRIMARY_BASE_URL": primary.base_url,
            "AGENT_WORKER_PROVIDER_BACKUP_BASE_URL": backup.base_url,
        },
    )
    [registration] = RESILIENT
    journal = ModelCallJournal(tmp_path / "journal")
    records = []
    for _attempt in range(2):
        agent = registration.build()
        model = JournaledModel(ModelChain(resolve_chain(registration, agent, config)), journal, "task-1", 1)
        run_config = RunConfig(model=model, tracing_disabled=True)
        result = await Runner.run(agent, "say hello", run_config=run_config)
        assert result.final_output == "journaled answer"
        records.append(model.records)
    assert len(primary.requests) == 1 and len(backup.requests) == 1
    [first], [again] = records
    assert first["model"] == again["model"] == f"backup:model-2@{backup.base_url}"
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert again["skipped"] == first["skipped"] and first["skipped"][0]["reason"].startswith("outage: ")


def test_a_worker_refuses_to_start_when_an_agents_model_cannot_be_resolved(tmp_path: Path) -> None:
    """The start check names the agent and the missing setting: an unknown provider prefix, an
    OpenAI model with neither key nor base URL, and an agent with no model at all when nothing is
    configured; the scripted mode (tests, demo) still starts."""
    lost = UNRESOLVABLE[0]
    with pytest.raises(
        ConfigError, match=r"agent 'lost-agent': model 'nowhere/model-x' names provider 'nowhere'"
    ):
        check_models([lost], _config(tmp_path, {"OPENAI_API_KEY": "sk-test-not-real-0000"}))
    keyless = AgentRegistration(name="keyless", build=lambda: _agent("keyless", "gpt-4.1"))
    with pytest.raises(ConfigError, match=r"agent 'keyless': model 'gpt-4.1' needs OPENAI_API_KEY"):
        check_models([keyless], _config(tmp_path, {}))
    bare = AgentRegistration(name="bare", build=lambda: _agent("bare"))
    with pytest.raises(ConfigError, match=r"agent 'bare' has no model"):
        check_models([bare], _config(tmp_path, {}))
    check_models([bare], _config(tmp_path, {}, model_provider="scripted"))


async def test_the_worker_process_exits_naming_the_agent_whose_model_cannot_be_resolved(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """`agent-worker worker` with an agent whose model names an unknown provider exits non-zero at
    start, saying which agent and which provider, without polling."""
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        config_env,
        log,
        AGENT_WORKER_AGENTS="tests.test_models:UNRESOLVABLE",
        AGENT_WORKER_MODEL_PROVIDER="auto",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
    )
    try:
        code = await asyncio.to_thread(worker.wait, 60)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise
    text = log.read_text()
    assert code != 0, text
    assert "lost-agent" in text and "'nowhere'" in text


async def test_litellm_reaches_an_openai_compatible_server_without_retrying_on_its_own(
    tmp_path: Path, stubs: tuple[OpenAIStub, OpenAIStub]
) -> None:
    """A `litellm/openai/...` model goes through the SDK's LiteLLM extension to the local server's
    Chat Completions; a 503 reaches it once (LiteLLM's retries are off: Temporal owns them) and is an
    outage the fallback chain passes over."""
    pytest.importorskip("litellm")
    stub, _ = stubs
    stub.reply_text("hello through litellm")
    stub.always(503, message="litellm upstream down")
    config = _config(
        tmp_path,
        {"AGENT_WORKER_PROVIDER_LITELLM_BASE_URL": stub.base_url, "AGENT_WORKER_PROVIDER_LITELLM_KEY": "k-1"},
    )
    registration = AgentRegistration(
        name="lite", build=lambda: _agent("lite"), model="litellm/openai/gpt-lite"
    )
    [choice] = resolve_chain(registration, registration.build(), config)
    assert (choice.provider, choice.api, choice.name) == ("litellm", "litellm", "openai/gpt-lite")
    run_config = RunConfig(model=ModelChain([choice]), tracing_disabled=True)
    result = await Runner.run(registration.build(), "say hello", run_config=run_config)
    assert result.final_output == "hello through litellm"
    assert stub.paths() == ["/v1/chat/completions"] and stub.requests[0].body["model"] == "gpt-lite"
    with pytest.raises(Exception) as caught:
        await Runner.run(registration.build(), "again", run_config=run_config)
    assert len(stub.requests) == 2
    assert (fallback_reason(caught.value) or "").startswith("outage: ")


@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="live provider test: OPENAI_API_KEY not set")
async def test_the_live_openai_provider_answers_through_the_default_route(tmp_path: Path) -> None:
    """With a real key, a model string without prefix reaches OpenAI and answers."""
    config = _config(tmp_path, {"OPENAI_API_KEY": os.environ["OPENAI_API_KEY"]})
    registration = AgentRegistration(name="live", build=lambda: _agent("live"), model="gpt-4.1-mini")
    chain = resolve_chain(registration, registration.build(), config)
    result = await Runner.run(registration.build(), "Say OK.", run_config=RunConfig(model=ModelChain(chain)))
    assert str(result.final_output).strip()


def test_providers_are_configured_by_json_or_by_variable_and_their_keys_are_registered_secrets() -> None:
    """AGENT_WORKER_PROVIDERS (JSON) and AGENT_WORKER_PROVIDER_<NAME>_<SETTING> merge, a provider's bad
    setting is named by its variable, and every provider key is among the secrets redaction masks."""
    config = WorkerConfig.from_env(
        {
            "AGENT_WORKER_PROVIDERS": '{"local": {"base_url": "http://127.0.0.1:8000/v1", '
            '"api_key": "json-key-1"}}',
            "AGENT_WORKER_PROVIDER_LOCAL_API": "chat_completions",
            "AGENT_WORKER_PROVIDER_VLLM_SERVER_BASE_URL": "http://u:pw-in-url-9@vllm:8000/v1",
            "AGENT_WORKER_PROVIDER_VLLM_SERVER_TIMEOUT_SECONDS": "12.5",
        }
    )
    providers = config.model_providers()
    assert providers["local"].api == "chat_completions" and providers["local"].kind == "openai"
    assert providers["vllm_server"].timeout_seconds == 12.5 and providers["litellm"].kind == "litellm"
    secrets = config_secrets(config, {})
    assert "json-key-1" in secrets and "pw-in-url-9" in secrets
    assert "json-key-1" not in repr(config) and "json-key-1" not in config.model_dump_json()
    with pytest.raises(ConfigError, match="AGENT_WORKER_PROVIDER_LOCAL_API: "):
        WorkerConfig.from_env({"AGENT_WORKER_PROVIDER_LOCAL_API": "completions"})
    with pytest.raises(ConfigError, match="AGENT_WORKER_PROVIDER_LOCAL_PORT: unknown provider setting"):
        WorkerConfig.from_env({"AGENT_WORKER_PROVIDER_LOCAL_PORT": "1"})
    with pytest.raises(ConfigError, match="AGENT_WORKER_PROVIDERS: not valid JSON") as info:
        WorkerConfig.from_env({"AGENT_WORKER_PROVIDERS": '{"x": {"api_key": "leak-me"'})
    assert "leak-me" not in str(info.value)
