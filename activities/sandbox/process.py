"""The ``process`` sandbox tier: FOR TRUSTED DEVELOPMENT USE ONLY.

Commands run as local processes on the worker host. With bubblewrap (``bwrap``) each command gets no
network (unless the task grants it), a read-only view of the host root with the home and data
directories hidden, a private writable work dir at ``/work``, a private ``/tmp``, a non-root user with
no capabilities, and a kill timeout. Without bubblewrap it is a plain subprocess in the work dir with
a cleared environment: no isolation at all. Neither is a security boundary for hostile code: use the
``docker`` or ``e2b`` tier for that.

A process sandbox lives on one worker host; a fleet must route a task's sandbox activities to the
host that holds its work dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import structlog

from activities.errors import SandboxError
from activities.sandbox.base import (
    LABEL_BACKEND,
    LABEL_CREATED,
    LABEL_RUN,
    LABEL_TASK,
    LABEL_TENANT,
    ExecOutcome,
    SandboxInfo,
    sandbox_id_for,
)
from schemas.sandbox import CreateSandboxInput, ExecInput, SandboxBackend, SandboxRef

log = structlog.get_logger(__name__)

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_NOBODY = "65534"
# Output beyond this is dropped rather than held in worker memory.
_OUTPUT_HARD_LIMIT = 64 * 1024 * 1024
# How long past its own timeout a command may take before the activity kills it from outside.
_OUTSIDE_GRACE_SECONDS = 5.0


def bwrap_available() -> bool:
    """Whether bubblewrap is installed and can create a sandbox here."""
    path = shutil.which("bwrap")
    if path is None:
        return False
    probe = [path, "--ro-bind", "/", "/", "--unshare-all", "--unshare-user", "--uid", _NOBODY, "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class ProcessSandbox:
    """Work dirs under ``root``, one per task, commands isolated by bubblewrap when available."""

    backend = SandboxBackend.PROCESS

    def __init__(self, root: Path, isolation: Literal["auto", "bwrap", "none"] = "auto") -> None:
        self.root = Path(root).resolve()
        if isolation == "auto":
            isolation = "bwrap" if bwrap_available() else "none"
        elif isolation == "bwrap" and not bwrap_available():
            raise SandboxError(
                "process_isolation=bwrap but bubblewrap is not usable here "
                "(install the 'bubblewrap' package)",
                code="sandbox_unavailable",
                operation="sandbox.create",
                retryable="no",
            )
        self.isolation = isolation
        log.warning(
            "process sandbox tier is for trusted development use only",
            isolation=self.isolation,
            root=str(self.root),
        )

    def _dir(self, sandbox_id: str) -> Path:
        return self.root / sandbox_id

    def _work(self, sandbox_id: str) -> Path:
        return self._dir(sandbox_id) / "work"

    async def create(self, input: CreateSandboxInput, inputs: dict[str, bytes]) -> SandboxRef:
        sandbox_id = sandbox_id_for(input.task_id)
        work = self._work(sandbox_id)
        work.mkdir(parents=True, exist_ok=True)
        work.chmod(0o777)  # the sandbox user (nobody) writes here
        labels = self._dir(sandbox_id) / "labels.json"
        if not labels.exists():
            labels.write_text(
                json.dumps(
                    {
                        LABEL_TASK: input.task_id,
                        LABEL_TENANT: input.tenant,
                        LABEL_RUN: input.run_id,
                        LABEL_BACKEND: "process",
                        LABEL_CREATED: datetime.now(UTC).isoformat(),
                        "agent-worker.trusted_only": "true",
                    }
                )
            )
        for name, data in inputs.items():
            target = self._inside(work, name, "sandbox.create")
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
        return SandboxRef(
            backend=self.backend, sandbox_id=sandbox_id, isolation=self.isolation, trusted_only=True
        )

    def _argv(self, input: ExecInput, timeout: float) -> list[str]:
        work = self._work(input.sandbox.sandbox_id)
        # The command is killed from inside too, so it dies even if the worker vanishes.
        inner = ["timeout", "-s", "KILL", f"{timeout:g}", *input.command.argv]
        if self.isolation == "none":
            return inner
        argv = ["bwrap", "--ro-bind", "/", "/"]
        # Hide the worker's home and data dir (other tasks' work, artifacts, databases).
        for hidden in sorted({str(Path.home()), str(self.root.parent)}, key=len):
            argv += ["--tmpfs", hidden]
        argv += [
            "--bind", str(work), "/work", "--chdir", "/work",
            "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev",
            "--unshare-all", "--unshare-user", "--uid", _NOBODY, "--gid", _NOBODY,
            "--die-with-parent", "--new-session",
            "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/work",
        ]  # fmt: skip
        if input.spec.network:
            argv.append("--share-net")
        return [*argv, "--", *inner]

    async def exec(self, input: ExecInput) -> ExecOutcome:
        work = self._work(input.sandbox.sandbox_id)
        if not work.is_dir():
            raise SandboxError(
                f"sandbox {input.sandbox.sandbox_id} is gone",
                code="sandbox_missing",
                operation="sandbox.exec",
                retryable="no",
            )
        timeout = input.command.timeout_seconds or input.spec.command_timeout_seconds
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *self._argv(input, timeout),
            cwd=work,
            env={"PATH": SANDBOX_PATH, "HOME": str(work)},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            stdin = input.command.stdin.encode() if input.command.stdin is not None else b""
            out, err = await asyncio.wait_for(
                _communicate(proc, stdin), timeout=timeout + _OUTSIDE_GRACE_SECONDS
            )
        except TimeoutError:
            _kill_group(proc)
            await proc.wait()
            return ExecOutcome(None, b"", b"killed: command exceeded its timeout", timed_out=True)
        finally:
            # Cancellation (or any error) must not leave the command running.
            if proc.returncode is None:
                _kill_group(proc)
                with contextlib.suppress(Exception):
                    await asyncio.shield(proc.wait())
        # timeout(1) reports a KILLed command as 137; a command may exit 137 by itself, so the
        # elapsed time decides.
        timed_out = proc.returncode in (124, 137, -9) and time.monotonic() - started >= timeout
        return ExecOutcome(proc.returncode, out, err, timed_out=timed_out)

    async def read_file(self, ref: SandboxRef, name: str) -> bytes | None:
        path = self._inside(self._work(ref.sandbox_id), name, "sandbox.exec")
        return path.read_bytes() if path.is_file() else None

    @staticmethod
    def _inside(work: Path, name: str, operation: str) -> Path:
        """``work / name``, refusing names (``..``, symlinks) that lead outside the work dir."""
        work = work.resolve()
        path = (work / name).resolve()
        if work not in path.parents:
            raise SandboxError(
                f"{name!r} is outside the work dir", code="bad_path", operation=operation, retryable="no"
            )
        return path

    async def destroy(self, ref: SandboxRef) -> bool:
        path = self._dir(ref.sandbox_id)
        existed = path.exists()
        if existed:
            await asyncio.to_thread(shutil.rmtree, path, True)
        return existed

    async def list(self) -> list[SandboxInfo]:
        found = []
        now = datetime.now(UTC)
        for labels in self.root.glob("aw-*/labels.json"):
            try:
                data = json.loads(labels.read_text())
                created = datetime.fromisoformat(data[LABEL_CREATED])
            except (OSError, ValueError, KeyError):
                data, created = {}, datetime.fromtimestamp(labels.stat().st_mtime, UTC)
            found.append(
                SandboxInfo(
                    sandbox_id=labels.parent.name,
                    task_id=data.get(LABEL_TASK),
                    age_seconds=(now - created).total_seconds(),
                    backend=self.backend,
                )
            )
        return found


async def _communicate(proc: asyncio.subprocess.Process, stdin: bytes) -> tuple[bytes, bytes]:
    assert proc.stdin and proc.stdout and proc.stderr
    proc.stdin.write(stdin)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        await proc.stdin.drain()
    proc.stdin.close()
    out, err = await asyncio.gather(_read_capped(proc.stdout), _read_capped(proc.stderr))
    await proc.wait()
    return out, err


async def _read_capped(stream: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(65536):
        if size < _OUTPUT_HARD_LIMIT:
            chunks.append(chunk[: _OUTPUT_HARD_LIMIT - size])
        size += len(chunk)
    return b"".join(chunks)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
