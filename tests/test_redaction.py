"""Secrets never leave the worker as text: a worker process whose OPENAI_BASE_URL carries a password
and whose provider quotes the API key back in an error writes neither into a task's status, history,
event files or its own log; and the one redaction function masks what it promises."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import uuid
from pathlib import Path

from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.security.redact import config_secrets, redact, register_secrets
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client, WorkflowFailureError

from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import DevServer, TaskEnv, make_config, spawn_worker


async def everything_said_about(handle, events_dir: Path) -> str:  # type: ignore[no-untyped-def]
    """The task's status, its whole history and every event file, as one text."""
    status = await handle.query(AgentTaskWorkflow.status)
    history = (await handle.fetch_history()).to_json()
    # Payloads are base64 in the history's JSON: decode them, or a secret inside would go unseen.
    payloads = [
        base64.b64decode(d).decode("utf-8", "replace") for d in re.findall(r'"data": "([^"]+)"', history)
    ]
    events = "".join(p.read_text() for p in sorted(events_dir.glob("**/*.jsonl")))
    return "\n".join([status.model_dump_json(), history, *payloads, events])


async def test_a_base_url_password_and_a_key_quoted_by_the_provider_reach_no_status_event_or_log(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """A worker process with `OPENAI_BASE_URL=http://agent:PASSWORD@.../v1` runs one task to completion
    (the model name with the URL is in usage, status and events) and fails another on a 401 whose
    message quotes the API key: status, history, event files and the worker's log contain neither the
    password nor the key, yet they do show the masked URL and the provider's masked words."""
    password = f"pw-{uuid.uuid4().hex[:16]}"
    api_key = f"sk-proj-{uuid.uuid4().hex}"
    log = tmp_path / "worker.log"
    with OpenAIStub() as stub:
        base_url = f"http://agent:{password}@127.0.0.1:{stub.port}/v1"
        config = make_config(tmp_path / "data", model_provider="openai", openai_model="gpt-test")
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        worker = spawn_worker(
            env,
            log,
            AGENT_WORKER_MODEL_PROVIDER="openai",
            AGENT_WORKER_OPENAI_MODEL="gpt-test",
            OPENAI_API_KEY=api_key,
            OPENAI_BASE_URL=base_url,
        )
        try:
            stub.reply_text("hello from the provider")
            done = await env.start({"agent": "plain", "prompt": "say hello"})
            result: TaskResult = await asyncio.wait_for(done.result(), 90)
            assert result.phase is TaskPhase.COMPLETED
            masked = f"openai:gpt-test@http://agent:***@127.0.0.1:{stub.port}/v1"
            assert result.usage.model == masked

            stub.reply_error(
                401,
                f"Incorrect API key provided: {api_key}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                code="invalid_api_key",
            )
            failed = await env.start({"agent": "plain", "prompt": "say hello again"})
            try:
                await asyncio.wait_for(failed.result(), 90)
                raise AssertionError("the task with a refused key completed")
            except WorkflowFailureError:
                pass
            status = await failed.query(AgentTaskWorkflow.status)
            assert status.phase is TaskPhase.FAILED
            assert status.reason and "Incorrect API key provided: ***" in status.reason, status.reason

            said = "\n".join(
                [
                    await everything_said_about(done, config.events_dir),
                    await everything_said_about(failed, config.events_dir),
                ]
            )
            assert masked in said  # the URL is reported, masked
            assert password not in said and api_key not in said
        finally:
            os.kill(worker.pid, signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)
    text = log.read_text()
    assert "Incorrect API key provided: ***" in text  # the failure was logged, masked
    assert password not in text and api_key not in text


def test_redact_masks_url_credentials_dsn_passwords_bearer_tokens_key_shapes_and_registered_secrets(
    tmp_path: Path,
) -> None:
    """Each kind of secret `redact` promises to mask is masked, decoded or percent-encoded; ordinary
    URLs and words are left alone; a worker config yields its secrets (keys, DSN and URL passwords,
    TEMPORAL_API_KEY) for registration."""
    config = WorkerConfig(
        data_dir=tmp_path,
        openai_api_key="key-without-a-known-shape-1",
        openai_base_url="https://alice:s3cr%40t-pw@llm.example/v1",
        business_dsn="host=db user=app password=db-pass-77 dbname=x",
    )
    found = config_secrets(config, {"TEMPORAL_API_KEY": "tmprl-api-key-42"})
    for secret in (
        "key-without-a-known-shape-1",
        "s3cr@t-pw",
        "s3cr%40t-pw",
        "db-pass-77",
        "tmprl-api-key-42",
    ):
        assert secret in found, secret
    register_secrets(*found)
    cases = {
        "GET https://alice:s3cr%40t-pw@llm.example/v1 failed": "GET https://alice:***@llm.example/v1 failed",
        "password s3cr@t-pw was refused": "password *** was refused",
        "token https://ghp_abcdef0123@git.example/x": "token https://***@git.example/x",
        "connect host=db password='two words' user=app": "connect host=db password=*** user=app",
        "postgresql://app:other-pw@db:5432/x?sslmode=require": "postgresql://app:***@db:5432/x?sslmode=require",
        "Authorization: Bearer tmprl-api-key-42": "Authorization: Bearer ***",
        "Authorization: Basic YWxpY2U6cHc=": "Authorization: Basic ***",
        "key sk-proj-abcdefghijklmnop0123 refused": "key *** refused",
        "e2b e2b_0123456789abcdef0123 refused": "e2b *** refused",
        "key-without-a-known-shape-1 leaked": "*** leaked",
        # Any case: the quick test that passes most text unsearched must not miss these.
        "SET PWD=Hunter-22 NOW": "SET PWD=*** NOW",
        "AUTHORIZATION: BEARER abcdef0123": "AUTHORIZATION: BEARER ***",
        "HTTPS://ALICE:PW-1234@HOST.EXAMPLE/": "HTTPS://ALICE:***@HOST.EXAMPLE/",
    }
    plain = "http://127.0.0.1:8080/v1 and user@example.com are fine"
    assert redact(plain) == plain
    for text, expected in cases.items():
        assert redact(text) == expected, text
    assert redact(json.dumps({"url": "https://alice:s3cr%40t-pw@llm.example/v1"})) == json.dumps(
        {"url": "https://alice:***@llm.example/v1"}
    )
