"""The ``e2b`` sandbox tier through the real ``e2b`` SDK: lifecycle against a local stand-in for the
E2B REST API (``tests/helpers/e2b_standin.py``), commands and files against the real E2B cloud when
``E2B_API_KEY`` is set. The stand-in has no envd, so offline tests create sandboxes without inputs."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.errors import SandboxError
from agent_worker.activities.sandbox import SandboxActivities
from agent_worker.activities.sandbox.base import (
    LABEL_BACKEND,
    LABEL_CREATED,
    LABEL_RUN,
    LABEL_TASK,
    LABEL_TENANT,
    sandbox_id_for,
)
from agent_worker.activities.sandbox.e2b import LABEL_SANDBOX, E2BSandbox
from agent_worker.schemas.actions import SandboxCommand
from agent_worker.schemas.sandbox import (
    CreateSandboxInput,
    ExecInput,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
)
from temporalio.exceptions import ApplicationError

from tests.helpers.e2b_standin import E2BStandIn, StoredSandbox

TASK = "task-e2b-test"
LIFETIME = 600


@pytest.fixture
def standin() -> Iterator[E2BStandIn]:
    server = E2BStandIn().start()
    yield server
    server.stop()


def _backend(standin: E2BStandIn, api_key: str | None = None) -> E2BSandbox:
    return E2BSandbox(
        api_key=api_key or standin.api_key,
        api_url=standin.url,
        domain="standin.invalid",
        template="aw-test-template",
        lifetime_seconds=LIFETIME,
        retries=0,  # the SDK's own retries would hide the answers the tests script
    )


@pytest.fixture
def backend(standin: E2BStandIn) -> E2BSandbox:
    return _backend(standin)


def _input(task_id: str = TASK, network: bool = False) -> CreateSandboxInput:
    spec = SandboxSpec(backend=SandboxBackend.E2B, network=network)
    return CreateSandboxInput(task_id=task_id, tenant="acme", spec=spec, run_id="run-1")


def _exec(ref: SandboxRef, argv: list[str], **command: object) -> ExecInput:
    return ExecInput(
        task_id=TASK,
        call_id=f"call-{uuid.uuid4().hex[:8]}",
        sandbox=ref,
        spec=SandboxSpec(backend=SandboxBackend.E2B),
        command=SandboxCommand(argv=argv, **command),  # type: ignore[arg-type]
    )


async def test_create_sends_idempotency_key_and_labels(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """Create looks the task up by metadata, then creates with the task's Idempotency-Key and labels."""
    ref = await backend.create(_input(), {})

    (lookup,) = standin.requests_to("GET", "/v2/sandboxes")
    assert f"{LABEL_TASK}={TASK}" in lookup.query["metadata"][0]
    (create,) = standin.requests_to("POST", "/v2/sandboxes")
    assert create.headers["idempotency-key"] == sandbox_id_for(TASK)
    assert create.headers["x-api-key"] == standin.api_key
    metadata = create.body["metadata"]
    assert metadata[LABEL_TASK] == TASK
    assert metadata[LABEL_TENANT] == "acme"
    assert metadata[LABEL_RUN] == "run-1"
    assert metadata[LABEL_BACKEND] == "e2b"
    assert metadata[LABEL_SANDBOX] == sandbox_id_for(TASK)
    assert datetime.fromisoformat(metadata[LABEL_CREATED]).tzinfo is not None
    assert create.body["templateID"] == "aw-test-template"
    assert create.body["timeout"] == LIFETIME
    assert create.body["allow_internet_access"] is False
    assert create.body["autoPause"] is False

    (stored,) = standin.sandboxes.values()
    assert ref == SandboxRef(
        backend=SandboxBackend.E2B,
        sandbox_id=sandbox_id_for(TASK),
        provider_id=stored.sandbox_id,
        isolation="e2b-microvm",
        trusted_only=False,
    )


async def test_network_follows_the_spec(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """A task granted network gets a sandbox with internet access."""
    await backend.create(_input(network=True), {})
    (create,) = standin.requests_to("POST", "/v2/sandboxes")
    assert create.body["allow_internet_access"] is True


async def test_retried_create_reuses_the_sandbox(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """A retried create finds the task's sandbox by metadata and makes no second one."""
    first = await backend.create(_input(), {})
    second = await _backend(standin).create(_input(), {})

    assert second == first
    assert len(standin.sandboxes) == 1
    assert len(standin.requests_to("POST", "/v2/sandboxes")) == 1


async def test_racing_creates_get_one_sandbox(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """Two creates that both miss the sandbox in their look-up still get one, by the Idempotency-Key."""
    standin.list_delay = 0.5  # both look-ups answer "none" before either create is sent
    first, second = await asyncio.gather(backend.create(_input(), {}), _backend(standin).create(_input(), {}))

    creates = standin.requests_to("POST", "/v2/sandboxes")
    assert len(creates) == 2
    assert {c.headers["idempotency-key"] for c in creates} == {sandbox_id_for(TASK)}
    assert first == second
    assert len(standin.sandboxes) == 1


async def test_list_returns_labelled_sandboxes(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """List finds every sandbox of this package by metadata, across pages, with its task id and age."""
    standin.page_size = 2
    tasks = [f"{TASK}-{i}" for i in range(3)]
    refs = {task: await backend.create(_input(task), {}) for task in tasks}
    foreign = StoredSandbox(
        sandbox_id="sbx-foreign",
        template_id="base",
        metadata={"owner": "someone else"},
        started_at=datetime.fromisoformat("2026-01-01T00:00:00+00:00"),
        timeout=60,
        allow_internet_access=None,
        auto_pause=False,
    )
    standin.sandboxes[foreign.sandbox_id] = foreign

    infos = await backend.list()

    assert sorted(i.task_id for i in infos if i.task_id) == tasks
    for info in infos:
        assert info.task_id is not None
        assert info.sandbox_id == sandbox_id_for(info.task_id)
        assert info.provider_id == refs[info.task_id].provider_id
        assert info.backend is SandboxBackend.E2B
        assert 0 <= info.age_seconds < 60
    listing = standin.requests_to("GET", "/v2/sandboxes")[-1]
    assert f"{LABEL_BACKEND}=e2b" in listing.query["metadata"][0]


async def test_destroy_kills_the_sandbox_once(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """Destroy kills the sandbox and says so; destroying it again is harmless and says it was gone."""
    ref = await backend.create(_input(), {})

    assert await backend.destroy(ref) is True
    assert standin.sandboxes == {}
    assert [r.path for r in standin.requests_to("DELETE", "/sandboxes/.+")] == [
        f"/sandboxes/{ref.provider_id}"
    ]
    assert await backend.destroy(ref) is False
    assert await backend.list() == []


async def test_destroy_finds_a_ref_without_provider_id(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """A ref that lost its E2B id is destroyed through the sandbox-id metadata."""
    ref = await backend.create(_input(), {})
    assert await backend.destroy(ref.model_copy(update={"provider_id": ""})) is True
    assert standin.sandboxes == {}


async def test_exec_in_a_gone_sandbox_is_not_retried(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """A command for a sandbox that no longer exists fails as sandbox_missing, not retryable."""
    ref = await backend.create(_input(), {})
    await backend.destroy(ref)

    with pytest.raises(SandboxError) as caught:
        await backend.exec(_exec(ref, ["true"]))
    assert (caught.value.code, caught.value.retryable) == ("sandbox_missing", "no")
    assert standin.requests_to("POST", f"/v2/sandboxes/{ref.provider_id}/connect")


async def test_auth_failure_is_not_retryable(standin: E2BStandIn, tmp_path: Path) -> None:
    """A rejected API key fails create for good: a non-retryable SandboxError, then ApplicationError."""
    backend = _backend(standin, api_key="e2b_wrong_key")
    with pytest.raises(SandboxError) as caught:
        await backend.create(_input(), {})
    assert (caught.value.code, caught.value.retryable) == ("e2b_auth_failed", "no")
    assert standin.requests[-1].headers["x-api-key"] == "e2b_wrong_key"
    assert standin.sandboxes == {}

    acts = SandboxActivities({SandboxBackend.E2B: backend}, LocalArtifactStore(tmp_path / "artifacts"))
    with pytest.raises(ApplicationError) as app_error:
        await acts.create(_input())
    assert app_error.value.type == "e2b_auth_failed"
    assert app_error.value.non_retryable


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (429, "e2b_rate_limited", "yes"),
        (503, "e2b_busy", "yes"),
        (500, "e2b_api_error", "yes"),
        (400, "e2b_api_error", "no"),
    ],
)
async def test_api_errors_say_whether_to_retry(
    standin: E2BStandIn, backend: E2BSandbox, status: int, code: str, retryable: str
) -> None:
    """Rate limits and server errors are retryable, a refused request is not."""
    standin.fail_next(status, "scripted failure")
    with pytest.raises(SandboxError) as caught:
        await backend.create(_input(), {})
    assert (caught.value.code, caught.value.retryable) == (code, retryable)
    assert caught.value.operation == "sandbox.create"


async def test_unreachable_api_is_retryable(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """When the API cannot be reached at all, the error is a retryable network failure."""
    standin.stop()
    with pytest.raises(SandboxError) as caught:
        await backend.list()
    assert (caught.value.code, caught.value.retryable) == ("e2b_network", "yes")


async def test_unsafe_input_names_are_refused(standin: E2BStandIn, backend: E2BSandbox) -> None:
    """An input name that leads outside the work dir is refused before any sandbox is made."""
    with pytest.raises(SandboxError) as caught:
        await backend.create(_input(), {"../escape.txt": b"x"})
    assert (caught.value.code, caught.value.retryable) == ("bad_path", "no")
    assert standin.requests == []


def test_missing_sdk_names_the_extra(standin: E2BStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the e2b package the backend says how to install it, and not to retry."""
    monkeypatch.setitem(sys.modules, "e2b", None)
    with pytest.raises(SandboxError) as caught:
        _backend(standin).sandboxes  # noqa: B018 - the first use imports the SDK
    assert caught.value.code == "backend_unavailable"
    assert caught.value.retryable == "no"
    assert "pip install 'agent-worker[e2b]'" in str(caught.value)


@pytest.mark.skipif(
    not os.environ.get("E2B_API_KEY"), reason="needs E2B_API_KEY (runs in the real E2B cloud)"
)
async def test_live_create_exec_read_destroy() -> None:
    """In the real E2B cloud: inputs land in the work dir, commands run there, files come back."""
    backend = E2BSandbox(
        api_key=os.environ["E2B_API_KEY"],
        domain=os.environ.get("E2B_DOMAIN") or None,
        template=os.environ.get("E2B_TEMPLATE") or "base",
        lifetime_seconds=300,
    )
    task = f"task-e2b-live-{uuid.uuid4().hex[:12]}"
    ref = await backend.create(_input(task), {"input.txt": b"hello\n"})
    try:
        again = await backend.create(_input(task), {"input.txt": b"hello\n"})
        assert again.provider_id == ref.provider_id

        outcome = await backend.exec(_exec(ref, ["python3", "-c", "print(6*7)"]))
        assert (outcome.exit_code, outcome.stdout, outcome.timed_out) == (0, b"42\n", False)

        script = "cat input.txt > output.txt; cat; echo oops >&2; exit 3"
        outcome = await backend.exec(_exec(ref, ["sh", "-c", script], stdin="from stdin\n"))
        assert (outcome.exit_code, outcome.stdout, outcome.stderr) == (3, b"from stdin\n", b"oops\n")
        assert await backend.read_file(ref, "output.txt") == b"hello\n"
        assert await backend.read_file(ref, "missing.txt") is None

        outcome = await backend.exec(_exec(ref, ["sleep", "30"], timeout_seconds=1))
        assert outcome.timed_out
        assert task in {info.task_id for info in await backend.list()}
    finally:
        assert await backend.destroy(ref) is True
    assert await backend.destroy(ref) is False
