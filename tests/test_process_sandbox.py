"""The process sandbox tier and the ``sandbox.*`` activities, run for real: bubblewrap isolation,
timeouts, cancellation, output capture and cleanup. No Temporal server is needed: the activity
methods are called directly."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_worker.activities.artifacts import LocalArtifactStore
from agent_worker.activities.errors import SandboxError
from agent_worker.activities.sandbox import ProcessSandbox, SandboxActivities
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
from temporalio.exceptions import ApplicationError

TASK = "task-sandbox-test"
INPUTS = {"sales.csv": b"date,amount\n2026-10-01,12.50\n", "notes.txt": "caf\u00e9\n".encode()}


def _setup(root: Path, store: LocalArtifactStore, isolation: str = "bwrap") -> SandboxActivities:
    # "none" is a plain subprocess: only with the explicit unsafe development setting.
    sandbox = ProcessSandbox(root, isolation=isolation, unsafe_dev=isolation == "none")  # type: ignore[arg-type]
    assert sandbox.isolation == isolation
    return SandboxActivities({SandboxBackend.PROCESS: sandbox}, store)


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


@pytest.fixture
def acts(tmp_path: Path, store: LocalArtifactStore) -> SandboxActivities:
    return _setup(tmp_path / "sandboxes", store)


async def _create(
    acts: SandboxActivities, files: dict[str, bytes] | None = None, spec: SandboxSpec | None = None
) -> SandboxRef:
    refs = [acts.store.ref(name, data, "text/plain") for name, data in (files or {}).items()]
    return await acts.create(
        CreateSandboxInput(task_id=TASK, tenant="acme", spec=spec or SandboxSpec(), inputs=refs)
    )


def _exec_input(
    ref: SandboxRef, argv: list[str], spec: SandboxSpec | None = None, **command: object
) -> ExecInput:
    return ExecInput(
        task_id=TASK,
        call_id="call-1",
        sandbox=ref,
        spec=spec or SandboxSpec(),
        command=SandboxCommand(argv=argv, **command),  # type: ignore[arg-type]
    )


async def _run(
    acts: SandboxActivities,
    ref: SandboxRef,
    argv: list[str],
    spec: SandboxSpec | None = None,
    **command: object,
) -> CommandRecord:
    return await acts.exec(_exec_input(ref, argv, spec, **command))


def _work(acts: SandboxActivities, ref: SandboxRef) -> Path:
    sandbox = acts.backends[SandboxBackend.PROCESS]
    assert isinstance(sandbox, ProcessSandbox)
    return sandbox.root / ref.sandbox_id / "work"


def _pids_with(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (zombies have an empty one)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


async def test_create_copies_inputs_with_matching_digests(acts: SandboxActivities) -> None:
    """Every input lands in the work dir with the bytes of its digest, and commands can read it."""
    ref = await _create(acts, INPUTS)
    assert ref.isolation == "bwrap"
    assert ref.trusted_only is True
    work = _work(acts, ref)
    for name, data in INPUTS.items():
        assert digest_bytes((work / name).read_bytes()) == digest_bytes(data)
    record = await _run(acts, ref, ["cat", "sales.csv"])
    assert record.stdout == INPUTS["sales.csv"].decode()


async def test_retried_create_reuses_the_same_sandbox(acts: SandboxActivities, tmp_path: Path) -> None:
    """A retried create for the same task returns the same sandbox id, with no second dir or copy."""
    first = await _create(acts, INPUTS)
    labels = (_work(acts, first).parent / "labels.json").read_bytes()
    second = await _create(acts, INPUTS)
    assert second.sandbox_id == first.sandbox_id
    assert [p.name for p in (tmp_path / "sandboxes").iterdir()] == [first.sandbox_id]
    assert sorted(p.name for p in _work(acts, second).iterdir()) == sorted(INPUTS)
    assert (_work(acts, second).parent / "labels.json").read_bytes() == labels


async def test_command_reports_stdout_stderr_and_exit_code(acts: SandboxActivities) -> None:
    """A command's stdout, stderr, exit code and stdin reach the record untruncated."""
    ref = await _create(acts)
    record = await _run(acts, ref, ["sh", "-c", "cat; echo out; echo err >&2; exit 3"], stdin="in:")
    assert (record.exit_code, record.timed_out, record.truncated) == (3, False, False)
    assert (record.stdout, record.stderr) == ("in:out\n", "err\n")
    assert (record.call_id, record.sandbox_id) == ("call-1", ref.sandbox_id)
    assert record.argv == ["sh", "-c", "cat; echo out; echo err >&2; exit 3"]


async def test_full_output_is_an_artifact_while_the_record_is_capped(
    acts: SandboxActivities, store: LocalArtifactStore
) -> None:
    """Output over ``output_limit_bytes`` is cut in the record (``truncated``) but stored whole."""
    spec = SandboxSpec(output_limit_bytes=256)
    ref = await _create(acts, spec=spec)
    script = "head -c 1000 /dev/zero | tr '\\0' o; head -c 300 /dev/zero | tr '\\0' e >&2"
    record = await _run(acts, ref, ["sh", "-c", script], spec=spec)
    assert record.truncated is True
    assert (record.stdout, record.stderr) == ("o" * 256, "e" * 256)
    for artifact, full in ((record.stdout_artifact, b"o" * 1000), (record.stderr_artifact, b"e" * 300)):
        assert artifact.digest == digest_bytes(full)
        assert artifact.size == len(full)
        assert store.get(artifact.digest) == full


async def test_collected_files_become_artifacts_and_missing_ones_are_listed(
    acts: SandboxActivities, store: LocalArtifactStore
) -> None:
    """``collect`` stores each file the command produced and lists the ones it did not."""
    ref = await _create(acts)
    script = "mkdir -p sub && printf 'total,42' > result.csv && printf z > sub/z.txt"
    collect = ["result.csv", "sub/z.txt", "absent.txt"]
    record = await _run(acts, ref, ["sh", "-c", script], collect=collect)
    assert record.exit_code == 0
    assert [o.name for o in record.outputs] == ["result.csv", "sub/z.txt"]
    assert [store.get(o.digest) for o in record.outputs] == [b"total,42", b"z"]
    assert record.missing_outputs == ["absent.txt"]


@pytest.mark.parametrize("name", ["../labels.json", "leak"])
async def test_collect_refuses_paths_outside_the_work_dir(acts: SandboxActivities, name: str) -> None:
    """A collected name that escapes the work dir (by ``..`` or a symlink) is refused, not read."""
    ref = await _create(acts)
    with pytest.raises(ApplicationError) as info:
        await _run(acts, ref, ["ln", "-s", "/etc/hostname", "leak"], collect=[name])
    assert info.value.type == "bad_path"


async def test_bwrap_has_no_network(acts: SandboxActivities) -> None:
    """Without ``network`` a command cannot reach a server outside the sandbox; with it, it can."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = ["python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 5)"]
    async with server:
        ref = await _create(acts)
        isolated = await _run(acts, ref, probe)
        shared = await _run(acts, ref, probe, spec=SandboxSpec(network=True))
    assert isolated.exit_code != 0
    assert "ConnectionRefusedError" in isolated.stderr or "unreachable" in isolated.stderr
    assert (shared.exit_code, shared.stderr) == (0, "")


async def test_bwrap_root_filesystem_is_read_only(acts: SandboxActivities) -> None:
    """Writing outside the work dir, e.g. ``/etc/x``, fails because the root is mounted read-only."""
    ref = await _create(acts)
    name = f"/etc/aw-test-{uuid.uuid4().hex}"
    record = await _run(acts, ref, ["sh", "-c", f"echo x > {name}"])
    assert record.exit_code != 0
    assert "Read-only file system" in record.stderr
    assert not Path(name).exists()


async def test_bwrap_runs_as_nobody_in_the_work_dir(acts: SandboxActivities) -> None:
    """Commands run as uid/gid 65534 in ``/work``, with ``HOME`` there and a cleared environment."""
    ref = await _create(acts)
    record = await _run(acts, ref, ["sh", "-c", 'id -u; id -g; pwd; echo "$HOME"; env | sort'])
    lines = record.stdout.splitlines()
    assert lines[:4] == ["65534", "65534", "/work", "/work"]
    assert {line.split("=", 1)[0] for line in lines[4:]} <= {"PATH", "HOME", "PWD", "OLDPWD"}


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A dir outside /tmp: the sandbox's private /tmp would hide anything under it anyway."""
    base = Path(tempfile.mkdtemp(prefix="aw-sandbox-test-", dir="/var/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


async def test_bwrap_hides_the_data_dir_and_home(
    outside_tmp: Path, store: LocalArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's data dir (other tasks, databases) and its home are empty inside the sandbox."""
    home, data = outside_tmp / "home", outside_tmp / "data"
    home.mkdir()
    data.mkdir()
    (home / "secret.txt").write_text("HOME-SECRET")
    (data / "business.db").write_text("DB-CONTENT")
    monkeypatch.setenv("HOME", str(home))
    acts = _setup(data / "sandboxes", store)
    ref = await _create(acts)
    script = 'ls -A "$0" "$1"; cat "$0/secret.txt" "$1/business.db"'
    record = await _run(acts, ref, ["sh", "-c", script, str(home), str(data)])
    for visible in ("secret.txt", "business.db", "sandboxes", "HOME-SECRET", "DB-CONTENT"):
        assert visible not in record.stdout
    assert record.exit_code != 0  # cat found nothing to read


async def test_work_dir_writes_persist_between_commands(acts: SandboxActivities) -> None:
    """A file the sandbox user writes in the work dir is there for the next command and the host."""
    ref = await _create(acts, INPUTS)
    first = await _run(acts, ref, ["sh", "-c", "echo kept > note.txt && echo more >> sales.csv"])
    assert first.exit_code == 0
    second = await _run(acts, ref, ["cat", "note.txt"])
    assert second.stdout == "kept\n"
    assert (_work(acts, ref) / "note.txt").read_bytes() == b"kept\n"
    assert (_work(acts, ref) / "sales.csv").read_bytes() == INPUTS["sales.csv"] + b"more\n"


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
async def test_command_over_its_timeout_is_killed(
    tmp_path: Path, store: LocalArtifactStore, isolation: str
) -> None:
    """A command running past its timeout is killed and reported ``timed_out``."""
    acts = _setup(tmp_path / "sandboxes", store, isolation)
    ref = await _create(acts)
    record = await _run(acts, ref, ["sleep", "30"], timeout_seconds=1)
    assert record.timed_out is True
    assert record.exit_code != 0


@pytest.mark.parametrize("code", [124, 137])
async def test_command_exiting_with_a_timeout_like_code_is_not_timed_out(
    acts: SandboxActivities, code: int
) -> None:
    """A command that exits on its own with 124 or 137 before its timeout is not ``timed_out``."""
    ref = await _create(acts)
    record = await _run(acts, ref, ["sh", "-c", f"exit {code}"], timeout_seconds=600)
    assert record.exit_code == code
    assert record.timed_out is False


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
async def test_cancelling_exec_kills_the_command(
    tmp_path: Path, store: LocalArtifactStore, isolation: str
) -> None:
    """Cancelling the task running ``exec`` leaves no process of the command behind."""
    acts = _setup(tmp_path / "sandboxes", store, isolation)
    ref = await _create(acts)
    marker = f"aw-cancel-{uuid.uuid4().hex}"
    argv = ["python3", "-c", "import time; time.sleep(3600)", marker]
    task = asyncio.create_task(_run(acts, ref, argv, timeout_seconds=3600))
    for _ in range(400):  # wait for the command to start
        if _pids_with(marker) or task.done():
            break
        await asyncio.sleep(0.05)
    assert _pids_with(marker), "the command never started"
    task.cancel()
    # If the command were left running, this would wait out its hour (the suite's timeout fails it).
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _pids_with(marker) == []


async def test_destroy_removes_the_sandbox_once(acts: SandboxActivities) -> None:
    """Destroy deletes the sandbox dir and reports it existed; a second destroy reports it did not."""
    ref = await _create(acts, INPUTS)
    sandbox_dir = _work(acts, ref).parent
    first = await acts.destroy(DestroySandboxInput(task_id=TASK, sandbox=ref))
    assert (first.sandbox_id, first.existed) == (ref.sandbox_id, True)
    assert not sandbox_dir.exists()
    second = await acts.destroy(DestroySandboxInput(task_id=TASK, sandbox=ref))
    assert second.existed is False


async def test_exec_after_destroy_is_sandbox_missing(acts: SandboxActivities) -> None:
    """Running a command in a destroyed sandbox fails with ``sandbox_missing``, never retried."""
    ref = await _create(acts)
    await acts.destroy(DestroySandboxInput(task_id=TASK, sandbox=ref))
    backend = acts.backends[SandboxBackend.PROCESS]
    with pytest.raises(SandboxError) as raw:
        await backend.exec(_exec_input(ref, ["true"]))
    assert raw.value.code == "sandbox_missing"
    with pytest.raises(ApplicationError) as translated:
        await _run(acts, ref, ["true"])
    assert translated.value.type == "sandbox_missing"
    assert translated.value.non_retryable is True


async def test_missing_backend_is_a_non_retryable_error(store: LocalArtifactStore) -> None:
    """A worker without the requested backend refuses the create with ``backend_unavailable``."""
    acts = SandboxActivities({}, store)
    with pytest.raises(ApplicationError) as info:
        await _create(acts, spec=SandboxSpec(backend=SandboxBackend.DOCKER))
    assert (info.value.type, info.value.non_retryable) == ("backend_unavailable", True)


async def test_isolation_none_runs_plain_subprocesses_with_a_cleared_env(
    tmp_path: Path, store: LocalArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without bubblewrap a command runs as the worker's user, in the work dir, without its env."""
    monkeypatch.setenv("AW_TEST_LEAK", "from-the-worker")
    acts = _setup(tmp_path / "sandboxes", store, "none")
    ref = await _create(acts, INPUTS)
    assert ref.isolation == "none"
    record = await _run(acts, ref, ["sh", "-c", "id -u; pwd; ls; env"])
    lines = record.stdout.splitlines()
    assert lines[:2] == [str(os.getuid()), str(_work(acts, ref))]
    assert sorted(lines[2:4]) == sorted(INPUTS)
    assert "AW_TEST_LEAK" not in record.stdout
    assert "from-the-worker" not in record.stdout
