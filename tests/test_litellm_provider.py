"""The LiteLLM provider as docs/models.md shows it: a keyless OpenAI-compatible server through
``litellm/openai/<model>`` runs tasks, a provider that cannot work stops the worker at start naming
the setting, and LiteLLM starts offline with its bundled cost map.

Real parts: LiteLLM, the project's OpenAI-compatible server (tests/helpers/openai_stub.py) on
loopback, a worker in its own process (``agent-worker worker``) and the real Temporal dev server.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.agent.providers import (
    LITELLM_LOCAL_COST_MAP,
    check_models,
    use_bundled_litellm_cost_map,
)
from agent_worker.activities.agent.registry import AgentRegistration
from agent_worker.schemas.config import ConfigError, WorkerConfig
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agents import Agent

from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import REPO, TaskEnv, spawn_worker, stop_worker

pytest.importorskip("litellm")

ANSWER = "hello through litellm, no key"
# Variables that would hide what is tested: a key LiteLLM would fall back on, or the switch set.
_AMBIENT = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", LITELLM_LOCAL_COST_MAP)


def _agent(name: str) -> Agent[Any]:
    return Agent(name=name, instructions="Answer briefly.")


# Loaded by import path, as a user's module would be.
KEYLESS = [
    AgentRegistration(name="keyless-lite", build=lambda: _agent("keyless-lite"), model="litellm/openai/qwen2")
]
CLAUDE = [
    AgentRegistration(
        name="claude-lite", build=lambda: _agent("claude-lite"), model="litellm/anthropic/claude-sonnet-4"
    )
]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def no_ambient_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _AMBIENT:
        monkeypatch.delenv(name, raising=False)


def _litellm_provider(base_url: str | None = None) -> str:
    """AGENT_WORKER_PROVIDERS as docs/models.md writes it (no key)."""
    entry: dict[str, Any] = {"kind": "litellm"}
    if base_url:
        entry["base_url"] = base_url
    return json.dumps({"litellm": entry})


async def test_the_documented_keyless_litellm_provider_runs_a_task_in_a_worker_process(
    config_env: TaskEnv, tmp_path: Path, stub: OpenAIStub, no_ambient_keys: None
) -> None:
    """A worker process with `{"litellm": {"kind": "litellm", "base_url": ...}}` and no key at all runs
    a `litellm/openai/qwen2` task to completion on the local server (which refuses streams: LiteLLM
    calls are not streamed), with one request, and its log has no cost-map fetch and no credentials
    error."""
    stub.refuse_stream(400, "Streaming is not supported by this server")
    stub.always(text=ANSWER)
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        config_env,
        log,
        AGENT_WORKER_AGENTS="tests.test_litellm_provider:KEYLESS",
        AGENT_WORKER_MODEL_PROVIDER="auto",
        AGENT_WORKER_PROVIDERS=_litellm_provider(stub.base_url),
    )
    try:
        handle = await config_env.start({"agent": "keyless-lite", "prompt": "say hello"})
        result: TaskResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        await asyncio.to_thread(stop_worker, worker)
    text = log.read_text()
    assert result.phase is TaskPhase.COMPLETED and result.final_output == ANSWER, text
    assert stub.paths() == ["/v1/chat/completions"] and stub.streamed() == [False]
    assert stub.requests[0].body["model"] == "qwen2"
    assert "cost map" not in text.lower() and "Missing credentials" not in text


def test_the_start_check_refuses_a_litellm_model_without_the_key_it_needs(
    tmp_path: Path, no_ambient_keys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no key anywhere, `litellm/anthropic/...` and `litellm/openai/...` without a base URL stop
    the start, naming LiteLLM's variable and the provider's setting; with the key (the provider's or
    LiteLLM's variable), or a base URL for the OpenAI-compatible route, the start goes on."""

    def config(providers: str) -> WorkerConfig:
        return WorkerConfig.from_env(
            {"AGENT_WORKER_PROVIDERS": providers}, data_dir=tmp_path / "data", model_provider="openai"
        )

    with pytest.raises(
        ConfigError,
        match=r"agent 'claude-lite': model 'litellm/anthropic/claude-sonnet-4' needs an API key: set "
        r"ANTHROPIC_API_KEY \(LiteLLM's variable\) or AGENT_WORKER_PROVIDER_LITELLM_API_KEY$",
    ):
        check_models(CLAUDE, config(_litellm_provider()))
    with pytest.raises(
        ConfigError,
        match=r"set OPENAI_API_KEY .* \(or AGENT_WORKER_PROVIDER_LITELLM_BASE_URL for an OpenAI-compatible",
    ):
        check_models(KEYLESS, config(_litellm_provider()))
    check_models(KEYLESS, config(_litellm_provider("http://127.0.0.1:9/v1")))
    check_models(CLAUDE, config(json.dumps({"litellm": {"kind": "litellm", "api_key": "sk-ant-test"}})))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    check_models(CLAUDE, config(_litellm_provider()))


async def test_the_worker_process_exits_at_start_naming_the_missing_litellm_key(
    config_env: TaskEnv, tmp_path: Path, no_ambient_keys: None
) -> None:
    """`agent-worker worker` with a LiteLLM model that has no key exits non-zero before it polls,
    saying which variable or setting to give, instead of failing each task later."""
    log = tmp_path / "worker.log"
    worker = spawn_worker(
        config_env,
        log,
        AGENT_WORKER_AGENTS="tests.test_litellm_provider:CLAUDE",
        AGENT_WORKER_MODEL_PROVIDER="auto",
        AGENT_WORKER_PROVIDERS=_litellm_provider(),
    )
    try:
        code = await asyncio.to_thread(worker.wait, 120)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise
    text = log.read_text()
    assert code != 0, text
    assert "claude-lite" in text and "ANTHROPIC_API_KEY" in text
    assert "AGENT_WORKER_PROVIDER_LITELLM_API_KEY" in text


# Run in a fresh interpreter: record every name lookup and connection, then take our LiteLLM path.
_NO_NETWORK = """
import ipaddress, json, os, sys

attempts = []

def _hook(event, args):
    if event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    elif event == "socket.connect" and isinstance(args[1], tuple):
        host = str(args[1][0])
    else:
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        if host == "localhost":
            return
    attempts.append(host)

sys.addaudithook(_hook)
from agents import Agent
from agent_worker.activities.agent.providers import resolve_chain
from agent_worker.activities.agent.registry import AgentRegistration
from agent_worker.schemas.config import WorkerConfig

config = WorkerConfig.from_env(
    {"AGENT_WORKER_PROVIDERS": os.environ["PROVIDERS"]}, model_provider="openai"
)
registration = AgentRegistration(
    name="lite", build=lambda: Agent(name="lite", instructions="x"), model="litellm/openai/qwen2"
)
resolve_chain(registration, registration.build(), config)
import litellm

print(json.dumps({"attempts": attempts, "models": len(litellm.model_cost)}))
"""


def test_our_litellm_path_reads_the_bundled_cost_map_and_attempts_no_connection(
    no_ambient_keys: None,
) -> None:
    """A fresh interpreter that resolves a LiteLLM model through our path (which imports LiteLLM)
    looks up no host and connects nowhere but loopback, and LiteLLM still has its cost map (the
    bundled one)."""
    env = {key: value for key, value in os.environ.items() if key not in _AMBIENT}
    env |= {"PYTHONPATH": str(REPO), "PROVIDERS": _litellm_provider("http://127.0.0.1:9/v1")}
    done = subprocess.run(
        [sys.executable, "-c", _NO_NETWORK], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["attempts"] == [] and found["models"] > 1000
    assert "cost map" not in done.stderr.lower()


def test_an_explicit_litellm_cost_map_setting_is_left_as_the_user_set_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user who sets LITELLM_LOCAL_MODEL_COST_MAP keeps their value; unset, it becomes True."""
    monkeypatch.setenv(LITELLM_LOCAL_COST_MAP, "False")
    use_bundled_litellm_cost_map()
    assert os.environ[LITELLM_LOCAL_COST_MAP] == "False"
    monkeypatch.delenv(LITELLM_LOCAL_COST_MAP)
    use_bundled_litellm_cost_map()
    assert os.environ[LITELLM_LOCAL_COST_MAP] == "True"
