"""Contained by default, fail closed: what model code can reach on each sandbox tier, against real
bubblewrap, a real Docker daemon and a real dev server. The process tier hides host secrets and the
Docker socket and caps processes, memory and file size; ``auto`` never falls back to it; a worker
that cannot prove its isolation refuses to start unless told it is an unsafe development setup; the
Docker tier caps its work dir; the reaper judges only its own namespace's and deployment's sandboxes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.sandbox import ProcessSandbox, SandboxActivities
from agent_worker.activities.sandbox.base import LABEL_DEPLOYMENT, LABEL_NAMESPACE, LABEL_TASK
from agent_worker.activities.sandbox.docker import DockerSandbox
from agent_worker.activities.sandbox.pids_cgroup import PidsCgroups
from agent_worker.activities.sandbox.reaper import SandboxReaper
from agent_worker.schemas.actions import SandboxCommand
from agent_worker.schemas.config import ConfigError
from agent_worker.schemas.sandbox import (
    CommandRecord,
    CreateSandboxInput,
    DestroySandboxInput,
    ExecInput,
    ReapInput,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
)
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agent_worker.worker import build_sandboxes
from tests.helpers.support import REPO, TaskEnv, example_spec, make_config, running_worker, until

MIB = 1024 * 1024


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


class Box:
    """One sandbox of a tier, with a helper to run shell scripts in it."""

    def __init__(self, acts: SandboxActivities, ref: SandboxRef, spec: SandboxSpec) -> None:
        self.acts, self.ref, self.spec = acts, ref, spec

    async def sh(self, script: str, limit: float = 60) -> CommandRecord:
        return await self.acts.exec(
            ExecInput(
                task_id="containment",
                call_id=f"c-{uuid.uuid4().hex[:8]}",
                sandbox=self.ref,
                spec=self.spec,
                command=SandboxCommand(argv=["sh", "-c", script], timeout_seconds=limit),
            )
        )


async def make_box(acts: SandboxActivities, spec: SandboxSpec) -> Box:
    task_id = f"containment-{uuid.uuid4().hex[:8]}"
    ref = await acts.create(CreateSandboxInput(task_id=task_id, tenant="t", spec=spec))
    return Box(acts, ref, spec)


@pytest.fixture
async def process_box(tmp_path: Path, store: LocalArtifactStore) -> Box:
    """A process-tier sandbox as a worker configured with ``sandbox_backend=process`` builds it."""
    config = make_config(tmp_path / "data", sandbox_backend="process")
    backends, default, _ = build_sandboxes(config)
    assert default is SandboxBackend.PROCESS
    sandbox = backends[SandboxBackend.PROCESS]
    assert isinstance(sandbox, ProcessSandbox) and sandbox.isolation == "bwrap"
    return await make_box(SandboxActivities(backends, store, default), SandboxSpec(pids=64))


# ---- the process tier -----------------------------------------------------------------------------


async def test_process_tier_command_cannot_read_host_secrets_or_root_only_files(process_box: Box) -> None:
    """/etc/shadow, root's home and a root-only file in the work dir itself are unreadable."""
    sandbox = process_box.acts.backends[SandboxBackend.PROCESS]
    assert isinstance(sandbox, ProcessSandbox)
    planted = sandbox.root / process_box.ref.sandbox_id / "work" / "root-only.txt"
    planted.write_text("ROOT-ONLY-CONTENT")
    planted.chmod(0o600)
    assert os.geteuid() != 0 or Path("/etc/shadow").read_text()  # the host has what we try to read
    record = await process_box.sh(
        "cat /etc/shadow; cat /etc/gshadow; ls -A /root; cat root-only.txt; id -u; echo done"
    )
    assert record.stdout.splitlines()[-2:] == ["65534", "done"]
    assert "ROOT-ONLY-CONTENT" not in record.stdout
    assert "root:" not in record.stdout  # no shadow line of any kind
    assert "Permission denied" in record.stderr  # the planted file exists but is not ours


async def test_process_tier_command_cannot_reach_the_docker_socket(process_box: Box) -> None:
    """Neither Docker socket path exists inside, and connecting to it fails."""
    assert any(Path(p).exists() for p in ("/run/docker.sock", "/var/run/docker.sock"))  # on the host
    probe = (
        "import socket\n"
        "for path in ('/run/docker.sock', '/var/run/docker.sock'):\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n        s.connect(path); print('connected', path)\n"
        "    except OSError as e:\n        print('refused', path, e.errno)\n"
    )
    record = await process_box.sh(f'python3 -c "{probe}"; ls /run /var/run')
    assert "connected" not in record.stdout
    assert record.stdout.splitlines()[:2] == ["refused /run/docker.sock 2", "refused /var/run/docker.sock 2"]


async def test_process_tier_has_no_network_but_loopback(process_box: Box) -> None:
    """The only network interface inside is the sandbox's own loopback."""
    record = await process_box.sh("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert record.stdout.split() == ["lo"]


async def test_process_tier_caps_a_600_process_command(process_box: Box) -> None:
    """Starting 600 processes with a cap of 64 fails to fork; the sandbox stays usable."""
    forks = (
        "import os, time\n"
        "started = 0\n"
        "for _ in range(600):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as err:\n"
        "        print('refused:', err.strerror)\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(3)\n"
        "        os._exit(0)\n"
        "    started += 1\n"
        "print('started', started)\n"
    )
    record = await process_box.sh(f'python3 -c "{forks}"', limit=60)
    assert "refused: Resource temporarily unavailable" in record.stdout
    started = int(record.stdout.split()[-1])
    assert started < 64
    assert (await process_box.sh("echo still-alive")).stdout == "still-alive\n"


HOLD_FORKS = (
    "import os, sys, time\n"
    "started = 0\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as err:\n"
    "        print('refused:', err.strerror)\n"
    "        break\n"
    "    if pid == 0:\n"
    "        while not os.path.exists('release'):\n"
    "            time.sleep(0.05)\n"
    "        os._exit(0)\n"
    "    started += 1\n"
    "open('holding', 'w').write(str(started))\n"
    "print('started', started, flush=True)\n"
    "if 'then-release' in sys.argv:\n"
    "    open('release', 'w').close()\n"
    "for _ in range(started):\n"
    "    os.wait()\n"
)


async def test_process_tier_caps_each_command_on_its_own(tmp_path: Path, store: LocalArtifactStore) -> None:
    """Two sandboxes with a cap of 64 each: while one holds 40 processes, a fork bomb in the other
    still gets (nearly) its own 64 and no more, and both finish; a cap shared by every sandbox of the
    host (RLIMIT_NPROC of the one ``nobody`` user) would have left it about 20."""
    backends, default, _ = build_sandboxes(make_config(tmp_path / "data", sandbox_backend="process"))
    acts = SandboxActivities(backends, store, default)
    holder = await make_box(acts, SandboxSpec(pids=64))
    bomber = await make_box(acts, SandboxSpec(pids=64))
    sandbox = backends[SandboxBackend.PROCESS]
    assert isinstance(sandbox, ProcessSandbox)
    work = sandbox.root / holder.ref.sandbox_id / "work"
    (work / "hold.py").write_text(HOLD_FORKS)
    holding = asyncio.create_task(holder.sh("python3 hold.py 40", limit=120))
    await until(lambda: (work / "holding").exists() or holding.done(), 60, "the holder's 40 processes")
    assert (work / "holding").read_text() == "40"
    (sandbox.root / bomber.ref.sandbox_id / "work" / "hold.py").write_text(HOLD_FORKS)
    bomb = await bomber.sh("python3 hold.py 600 then-release", limit=120)
    started = int(bomb.stdout.split()[-1])
    assert "refused: Resource temporarily unavailable" in bomb.stdout
    assert 50 <= started < 64, bomb.stdout
    (work / "release").touch()
    held = await holding
    assert held.exit_code == 0 and held.stdout.split()[-1] == "40"
    assert (await bomber.sh("echo still-alive")).stdout == "still-alive\n"


async def test_the_unsafe_plain_subprocess_tier_is_capped_too(
    tmp_path: Path, store: LocalArtifactStore
) -> None:
    """``process_isolation=none`` (unsafe development) has no rlimits, but a worker that can make
    cgroups (root here, as in CI) still runs each command in its own ``pids`` cgroup: 600 forks are
    refused at the cap."""
    config = make_config(
        tmp_path / "data", sandbox_backend="process", process_isolation="none", sandbox_unsafe_dev=True
    )
    backends, default, _ = build_sandboxes(config)
    sandbox = backends[SandboxBackend.PROCESS]
    assert isinstance(sandbox, ProcessSandbox) and sandbox.cgroups is not None
    box = await make_box(SandboxActivities(backends, store, default), SandboxSpec(pids=64))
    (sandbox.root / box.ref.sandbox_id / "work" / "hold.py").write_text(HOLD_FORKS)
    bomb = await box.sh("python3 hold.py 600 then-release", limit=120)
    assert "refused: Resource temporarily unavailable" in bomb.stdout
    assert int(bomb.stdout.split()[-1]) < 64


def test_a_command_joins_a_v1_cgroup_by_its_thread_file(tmp_path: Path) -> None:
    """On a cgroup v1 hierarchy the command moves itself by writing 0 to ``tasks`` (the kernel then
    skips its process-wide threadgroup lock, whose RCU grace period cost every command 10-20 ms);
    where there is no ``tasks`` file (v2) it writes its pid to ``cgroup.procs``."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir(), v2.mkdir()
    (v1 / "tasks").touch(), (v1 / "cgroup.procs").touch(), (v2 / "cgroup.procs").touch()
    for where in (v1, v2):
        ran = subprocess.run(PidsCgroups.argv(where, ["echo", "ran"]), capture_output=True, text=True)
        assert ran.returncode == 0 and ran.stdout == "ran\n", ran
    assert (v1 / "tasks").read_text() == "0\n" and (v1 / "cgroup.procs").read_text() == ""
    assert (v2 / "cgroup.procs").read_text().strip().isdigit()


async def test_process_tier_caps_memory_and_file_size(tmp_path: Path, store: LocalArtifactStore) -> None:
    """Allocating past ``memory_mb`` fails, and a file past ``work_dir_mb`` is cut off at the cap."""
    config = make_config(tmp_path / "data", sandbox_backend="process")
    backends, default, _ = build_sandboxes(config)
    box = await make_box(
        SandboxActivities(backends, store, default), SandboxSpec(memory_mb=64, work_dir_mb=16)
    )
    memory = await box.sh("python3 -c 'x = bytearray(200 * 1024 * 1024); print(\"survived\")'")
    assert memory.exit_code != 0 and "survived" not in memory.stdout
    assert "MemoryError" in memory.stderr
    disk = await box.sh("head -c 40000000 /dev/zero > big.bin")
    assert disk.exit_code != 0
    assert "File size limit exceeded" in disk.stderr
    sandbox = backends[SandboxBackend.PROCESS]
    assert isinstance(sandbox, ProcessSandbox)
    assert (sandbox.root / box.ref.sandbox_id / "work" / "big.bin").stat().st_size <= 16 * MIB


def test_process_tier_without_isolation_is_refused_unless_unsafe_dev(tmp_path: Path) -> None:
    """``process_isolation=none`` (a plain subprocess) needs the explicit unsafe development setting."""
    with pytest.raises(ConfigError) as refused:
        build_sandboxes(make_config(tmp_path / "a", sandbox_backend="process", process_isolation="none"))
    assert "AGENT_WORKER_SANDBOX_UNSAFE_DEV=true" in str(refused.value)
    unsafe = make_config(
        tmp_path / "b", sandbox_backend="process", process_isolation="none", sandbox_unsafe_dev=True
    )
    backends, _, _ = build_sandboxes(unsafe)
    sandbox = backends[SandboxBackend.PROCESS]
    assert isinstance(sandbox, ProcessSandbox) and sandbox.isolation == "none"


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "agent_worker.cli.main", "worker"],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def test_worker_refuses_to_start_the_process_tier_without_isolation(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """A worker whose process tier cannot prove its isolation (here: no bubblewrap on its PATH)
    exits at start saying what is missing and how to fix it; with AGENT_WORKER_SANDBOX_UNSAFE_DEV it
    starts, and says it is unsafe."""
    bin_dir = tmp_path / "bin"  # a PATH with the tools the tier needs, but no bubblewrap
    bin_dir.mkdir()
    for tool in ("sh", "timeout", "prlimit", "setpriv"):
        (bin_dir / tool).symlink_to(Path("/usr/bin", tool).resolve())
    env = {**config_env.worker_env(), "PATH": str(bin_dir), "AGENT_WORKER_SANDBOX_BACKEND": "process"}
    refused_log = tmp_path / "refused.log"
    refused = _worker(env, refused_log)
    code = await asyncio.to_thread(refused.wait, 60)
    text = refused_log.read_text()
    assert code != 0, text
    assert "cannot prove its isolation" in text and "bubblewrap is not installed" in text
    assert "AGENT_WORKER_SANDBOX_UNSAFE_DEV=true" in text
    assert "worker started" not in text

    unsafe_log = tmp_path / "unsafe.log"
    unsafe = _worker({**env, "AGENT_WORKER_SANDBOX_UNSAFE_DEV": "true"}, unsafe_log)
    try:
        deadline = time.monotonic() + 60
        while "worker started" not in unsafe_log.read_text():
            assert unsafe.poll() is None, unsafe_log.read_text()
            assert time.monotonic() < deadline, unsafe_log.read_text()
            await asyncio.sleep(0.2)
    finally:
        unsafe.send_signal(signal.SIGTERM)
        await asyncio.to_thread(unsafe.wait, 60)
    assert "UNSAFE" in unsafe_log.read_text()


# ---- auto ----------------------------------------------------------------------------------------


@pytest.fixture
async def imageless_env(config_env: TaskEnv, tmp_path: Path) -> AsyncIterator[TaskEnv]:
    """A worker with backend ``auto``, Docker running, and the sandbox image not built."""
    missing = f"agent-worker-sandbox:absent-{uuid.uuid4().hex[:8]}"
    config = make_config(tmp_path / "auto-data", sandbox_backend="auto", docker_image=missing)
    env = TaskEnv(client=config_env.client, config=config, address=config_env.address)
    async with running_worker(env.client, env.config):
        yield env


async def test_auto_with_the_image_missing_refuses_to_run_model_code(imageless_env: TaskEnv) -> None:
    """With Docker up but no image, ``auto`` picks no tier: the task fails naming the missing image
    and how to build it, and no command ran on the host."""
    handle = await imageless_env.start(example_spec())
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 60)
    chain, err = [], failed.value.cause
    while err is not None:
        chain.append(str(err))
        err = err.__cause__
    text = " | ".join(chain)
    assert "refusing to run model code" in text
    assert imageless_env.config.docker_image in text and "agent-worker sandbox-image" in text
    assert not imageless_env.config.sandbox_root.exists()  # no process-tier work dir was made


async def test_sandbox_activity_refuses_auto_when_no_contained_tier(store: LocalArtifactStore) -> None:
    """``sandbox.create`` with ``auto`` on a worker with no contained tier is a non-retryable
    ``sandbox_unavailable`` error carrying the reason."""
    acts = SandboxActivities({}, store, None, unavailable="docker: image 'x' is not present")
    with pytest.raises(ApplicationError) as refused:
        await acts.create(CreateSandboxInput(task_id="t", tenant="t", spec=SandboxSpec()))
    assert (refused.value.type, refused.value.non_retryable) == ("sandbox_unavailable", True)
    assert "image 'x' is not present" in str(refused.value)


# ---- the docker tier -----------------------------------------------------------------------------


async def test_docker_command_writing_past_the_work_dir_cap_fails_with_no_space(
    docker_image: str, store: LocalArtifactStore
) -> None:
    """Writing 40 MB into a 16 MiB work dir fails with "No space left on device"; the host's disk is
    untouched (the work dir is a capped tmpfs), and the sandbox stays usable."""
    acts = SandboxActivities(
        {SandboxBackend.DOCKER: DockerSandbox(docker_image)}, store, SandboxBackend.DOCKER
    )
    box = await make_box(acts, SandboxSpec(backend=SandboxBackend.DOCKER, work_dir_mb=16, memory_mb=128))
    try:
        record = await box.sh("head -c 40000000 /dev/zero > big.bin; echo rc=$?; du -k big.bin")
        assert "No space left on device" in record.stderr
        assert "rc=1" in record.stdout
        kib = int(record.stdout.splitlines()[-1].split()[0])
        assert kib <= 16 * 1024
        volume = docker.from_env().volumes.get(f"{box.ref.sandbox_id}-work")
        assert volume.attrs["Options"]["type"] == "tmpfs"
        assert (await box.sh("rm big.bin && echo freed")).stdout == "freed\n"
    finally:
        await acts.destroy(DestroySandboxInput(task_id="containment", sandbox=box.ref))


# ---- the reaper ----------------------------------------------------------------------------------


async def test_reaper_removes_only_its_own_namespace_and_deployment_orphans(
    client: Client, docker_image: str
) -> None:
    """Orphans of three owners share one Docker daemon: this namespace and deployment, another
    namespace, and another deployment in this namespace. The reaper removes only its own."""
    mine = DockerSandbox(docker_image, namespace=client.namespace, deployment="dep-a")
    owners = {
        "mine": mine,
        "other-namespace": DockerSandbox(docker_image, namespace="tenant-b", deployment="dep-a"),
        "other-deployment": DockerSandbox(docker_image, namespace=client.namespace, deployment="dep-b"),
    }
    spec = SandboxSpec(backend=SandboxBackend.DOCKER)
    refs: dict[str, SandboxRef] = {}
    for owner, backend in owners.items():
        ghost = f"ghost-{owner}-{uuid.uuid4().hex[:8]}"  # a task no namespace knows
        refs[owner] = await backend.create(CreateSandboxInput(task_id=ghost, tenant="t", spec=spec), {})
    daemon = docker.from_env()
    try:
        labels = daemon.containers.get(refs["other-namespace"].sandbox_id).labels
        assert (labels[LABEL_NAMESPACE], labels[LABEL_DEPLOYMENT]) == ("tenant-b", "dep-a")
        result = await SandboxReaper([mine], client).reap(ReapInput(min_age_seconds=0))
        assert [r.sandbox_id for r in result.removed] == [refs["mine"].sandbox_id]
        left = {c.name for c in daemon.containers.list(all=True, filters={"label": LABEL_TASK})}
        assert refs["mine"].sandbox_id not in left
        assert {refs["other-namespace"].sandbox_id, refs["other-deployment"].sandbox_id} <= left
    finally:
        for owner in ("other-namespace", "other-deployment"):
            await owners[owner].destroy(refs[owner])
