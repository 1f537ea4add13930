"""The docker sandbox tier against a real Docker daemon: containment, limits, timeouts, cancellation,
files in and out with digests, idempotent create, destroy. Each containment test asserts the failure
it expects inside the real container."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.sandbox import SandboxActivities
from agent_worker.activities.sandbox.docker import DockerSandbox
from agent_worker.schemas.actions import SandboxCommand
from agent_worker.schemas.digests import digest_bytes
from agent_worker.schemas.sandbox import (
    CommandRecord,
    CreateSandboxInput,
    DestroySandboxInput,
    ExecInput,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
)

from tests.helpers.containers import containers_of

SECRET = "aw-test-secret-value-do-not-leak"


class Box:
    """One test's sandbox, with helpers to run commands in it."""

    def __init__(self, acts: SandboxActivities, ref: SandboxRef, task_id: str, spec: SandboxSpec) -> None:
        self.acts, self.ref, self.task_id, self.spec = acts, ref, task_id, spec

    async def run(
        self, argv: list[str], *, limit: float = 30, collect: list[str] | None = None
    ) -> CommandRecord:
        command = SandboxCommand(argv=argv, timeout_seconds=limit, collect=collect or [])
        return await self.acts.exec(
            ExecInput(
                task_id=self.task_id,
                call_id=f"c-{uuid.uuid4().hex[:8]}",
                sandbox=self.ref,
                spec=self.spec,
                command=command,
            )
        )

    async def sh(self, script: str, **kwargs: object) -> CommandRecord:
        return await self.run(["sh", "-c", script], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


@pytest.fixture
def acts(docker_image: str, store: LocalArtifactStore) -> SandboxActivities:
    return SandboxActivities(
        {SandboxBackend.DOCKER: DockerSandbox(docker_image)}, store, SandboxBackend.DOCKER
    )


async def make_box(acts: SandboxActivities, store: LocalArtifactStore, **spec: object) -> Box:
    task_id = f"docker-test-{uuid.uuid4().hex[:8]}"
    sandbox_spec = SandboxSpec(backend=SandboxBackend.DOCKER, **spec)  # type: ignore[arg-type]
    inputs = [store.ref("sales.csv", b"date,amount\n2026-10-01,5\n", "text/csv")]
    ref = await acts.create(CreateSandboxInput(task_id=task_id, tenant="t", spec=sandbox_spec, inputs=inputs))
    return Box(acts, ref, task_id, sandbox_spec)


@pytest.fixture
async def box(acts: SandboxActivities, store: LocalArtifactStore) -> AsyncIterator[Box]:
    created = await make_box(acts, store, memory_mb=128, pids=64)
    yield created
    await acts.destroy(DestroySandboxInput(task_id=created.task_id, sandbox=created.ref))


async def test_only_loopback_and_no_name_resolution(box: Box) -> None:
    """No network: only `lo` exists and names do not resolve (no packet goes anywhere)."""
    record = await box.run(
        ["python3", "-c", "import os, json; print(json.dumps(sorted(os.listdir('/sys/class/net'))))"]
    )
    assert json.loads(record.stdout) == ["lo"]
    record = await box.run(["python3", "-c", "import socket; socket.getaddrinfo('deb.debian.org', 80)"])
    assert record.exit_code != 0 and "gaierror" in record.stderr


async def test_root_filesystem_is_read_only(box: Box) -> None:
    """Writing under /usr fails; the work dir is writable."""
    record = await box.sh("echo x > /usr/evil")
    assert record.exit_code != 0 and "Read-only file system" in record.stderr
    assert (await box.sh("echo ok > mine.txt && cat mine.txt")).stdout == "ok\n"


async def test_not_root_and_no_capabilities(box: Box) -> None:
    """The uid is not 0 and the effective capability set is empty."""
    record = await box.sh("id -u; grep CapEff /proc/self/status")
    uid, caps = record.stdout.split("\n")[:2]
    assert uid != "0"
    assert caps.split()[1] == "0000000000000000"


async def test_worker_secrets_are_not_visible(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret in the worker's environment is nowhere in the sandbox's environment."""
    monkeypatch.setenv("AW_TEST_SECRET", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    record = await box.sh("env; cat /proc/1/environ | tr '\\0' '\\n'")
    assert record.exit_code == 0
    assert SECRET not in record.stdout and "OPENAI_API_KEY" not in record.stdout


async def test_no_docker_socket(box: Box) -> None:
    """No Docker socket is mounted or reachable."""
    probe = (
        "import os, socket\n"
        "print(any(os.path.exists(p) for p in ('/var/run/docker.sock', '/run/docker.sock')))\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect('/var/run/docker.sock'); print('connected')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
    )
    record = await box.run(["python3", "-c", probe])
    assert record.stdout.splitlines() == ["False", "refused 2"]


async def test_memory_hog_is_killed_and_reported_out_of_memory(box: Box) -> None:
    """Allocating past the memory limit gets the command killed, reported as out-of-memory."""
    record = await box.run(["python3", "-c", "x = bytearray(1024 * 1024 * 1024); print('survived')"])
    assert record.exit_code == 137
    assert record.oom_killed is True and record.timed_out is False
    assert "survived" not in record.stdout
    assert (await box.sh("echo still-alive")).stdout == "still-alive\n"


async def test_fork_bomb_is_stopped_by_the_pids_limit(box: Box) -> None:
    """Forking past the pids limit fails inside the sandbox; the sandbox stays usable."""
    record = await box.sh("for i in $(seq 1 500); do sleep 2 & done; wait", limit=60)
    assert "fork" in record.stderr.lower()  # "Cannot fork" / "Resource temporarily unavailable"
    assert (await box.sh("echo still-alive")).stdout == "still-alive\n"


async def test_a_command_ignoring_its_timeout_is_killed(box: Box) -> None:
    """A command that runs past its timeout is killed, and the record says so."""
    record = await box.run(["sh", "-c", "trap '' TERM INT; sleep 60"], limit=1)
    assert record.timed_out is True
    assert record.exit_code == 137
    assert record.duration_ms < 30_000
    assert (await box.sh("ls /proc | grep -c '^[0-9]'")).stdout.strip() != ""  # the container lives on


async def test_cancelling_exec_kills_the_command(box: Box) -> None:
    """Cancelling the running exec leaves no process of the command in the container."""
    marker = f"aw-marker-{uuid.uuid4().hex[:8]}"
    task = asyncio.create_task(box.run(["python3", "-c", "import time; time.sleep(300)", marker], limit=600))
    for _ in range(100):
        if marker in (await box.sh("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")).stdout:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the command never started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    listing = await box.sh("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
    assert marker not in listing.stdout


async def test_files_in_and_out_with_digests(box: Box, store: LocalArtifactStore) -> None:
    """Inputs arrive byte for byte (same digest inside); declared outputs come back as artifacts."""
    record = await box.run(
        [
            "python3",
            "-c",
            "import hashlib; print('sha256:' + hashlib.sha256(open('sales.csv','rb').read()).hexdigest());"
            "open('out.txt', 'w').write('result 42')",
        ],
        collect=["out.txt", "missing.txt"],
    )
    assert record.stdout.strip() == digest_bytes(b"date,amount\n2026-10-01,5\n")
    [out] = record.outputs
    assert store.get(out.digest) == b"result 42" and out.digest == digest_bytes(b"result 42")
    assert record.missing_outputs == ["missing.txt"]
    assert store.get(record.stdout_artifact.digest).decode() == record.stdout


async def test_retried_create_reuses_the_container(
    acts: SandboxActivities, store: LocalArtifactStore, box: Box
) -> None:
    """Creating the same task's sandbox again finds the existing container instead of a second."""
    again = await acts.create(CreateSandboxInput(task_id=box.task_id, tenant="t", spec=box.spec, inputs=[]))
    assert again.provider_id == box.ref.provider_id
    assert containers_of(box.task_id) == [box.ref.provider_id]


async def test_destroy_removes_container_and_volume(
    acts: SandboxActivities, store: LocalArtifactStore
) -> None:
    """Destroy removes the container and its work volume; a second destroy reports it gone."""
    created = await make_box(acts, store)
    first = await acts.destroy(DestroySandboxInput(task_id=created.task_id, sandbox=created.ref))
    second = await acts.destroy(DestroySandboxInput(task_id=created.task_id, sandbox=created.ref))
    assert (first.existed, second.existed) == (True, False)
    client = docker.from_env()
    assert containers_of(created.task_id) == []
    assert client.volumes.list(filters={"name": f"{created.ref.sandbox_id}-work"}) == []


async def test_exec_in_a_removed_container_is_sandbox_missing(box: Box) -> None:
    """A container removed from outside is detected: a non-retryable sandbox_missing error."""
    from temporalio.exceptions import ApplicationError

    docker.from_env().containers.get(box.ref.sandbox_id).remove(force=True)
    with pytest.raises(ApplicationError) as caught:
        await box.sh("true")
    assert caught.value.type == "sandbox_missing" and caught.value.non_retryable


async def test_listing_while_sandboxes_are_made_and_removed_never_fails(docker_image: str) -> None:
    """The reaper's list runs while tasks make and remove sandboxes. The daemon lists a container a
    moment before it can inspect it (creating) and after (removing): the list takes both in its
    stride, naming each sandbox it lists, rather than fail on one being made or destroyed."""
    deployment = f"list-race-{uuid.uuid4().hex[:8]}"  # only this test's containers are listed
    backend = DockerSandbox(docker_image, namespace="default", deployment=deployment)
    spec = SandboxSpec(backend=SandboxBackend.DOCKER)
    made: set[str] = set()
    listed: set[str] = set()
    done = asyncio.Event()

    async def keep_listing() -> int:
        rounds = 0
        while not done.is_set():
            listed.update(info.sandbox_id for info in await backend.list())
            rounds += 1
        return rounds

    lister = asyncio.create_task(keep_listing())
    try:
        for n in range(12):
            ref = await backend.create(
                CreateSandboxInput(task_id=f"{deployment}-{n}", tenant="t", spec=spec), {}
            )
            made.add(ref.sandbox_id)
            await backend.destroy(ref)
    finally:
        done.set()
        rounds = await lister  # raises what a list raised
    assert rounds > 12 and listed and listed <= made
    assert await backend.list() == []
