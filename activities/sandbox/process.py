"""The ``process`` sandbox tier: FOR TRUSTED DEVELOPMENT USE ONLY.

Commands run as local processes on the worker host, only where the worker names this tier
(``sandbox_backend=process``; ``auto`` never picks it). With bubblewrap (``bwrap``) each command sees
only what commands need, read-only: ``/usr`` (and the ``/bin``, ``/lib*`` links), and an ``/etc``
holding a few public files (no ``shadow``, no keys); no ``/run`` (no Docker socket), no home, no data
dir. It gets a private writable work dir at ``/work``, a size-capped private ``/tmp``, no network
(unless the task grants it), a fresh pid, IPC and UTS namespace, the ``nobody`` user with no
capabilities, ``no_new_privs``, a kill timeout, and caps: processes (the spec's ``pids``, per
command: its own ``pids`` cgroup where the worker can make one, see ``pids_cgroup``, else
``RLIMIT_NPROC``, which counts per command in a user namespace but, for a root worker without
cgroups, every process of the host's ``nobody``), address space (``memory_mb``) and file size
(``work_dir_mb``). A worker running as root runs bubblewrap privileged and drops to the real
``nobody`` (so root's files stay root's); any other worker uses a user namespace.

The worker proves that isolation when it builds the tier (``ProcessSandbox.prove_isolation``) and
refuses to start otherwise. A plain subprocess (``isolation="none"``: the worker's user, its files,
its network) needs the explicit ``unsafe_dev`` setting (``AGENT_WORKER_SANDBOX_UNSAFE_DEV=true``).
Neither is a security boundary for hostile code: use the ``docker`` or ``e2b`` tier for that.

A process sandbox lives on one worker host: its ref names that host's home queue, and the task
sends its commands and destroy there (``workflows.placement.at_home``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import structlog
from agent_worker.activities.errors import SandboxError
from agent_worker.activities.sandbox.base import (
    LABEL_BACKEND,
    LABEL_CREATED,
    LABEL_DEPLOYMENT,
    LABEL_NAMESPACE,
    LABEL_RUN,
    LABEL_TASK,
    LABEL_TENANT,
    ExecOutcome,
    SandboxInfo,
    sandbox_id_for,
)
from agent_worker.activities.sandbox.pids_cgroup import PidsCgroups
from agent_worker.schemas.sandbox import (
    CreateSandboxInput,
    ExecInput,
    SandboxBackend,
    SandboxRef,
    SandboxSpec,
)

log = structlog.get_logger(__name__)

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_NOBODY = "65534"
# Output beyond this is dropped rather than held in worker memory.
_OUTPUT_HARD_LIMIT = 64 * 1024 * 1024
# How long past its own timeout a command may take before the activity kills it from outside.
_OUTSIDE_GRACE_SECONDS = 5.0
_MIB = 1024 * 1024
# RLIMIT_NPROC of a root worker's commands when a cgroup caps each: the real nobody's count is shared
# by every sandbox of the host, so it is only a host-wide backstop then, not the command's cap.
_NPROC_BACKSTOP = 65536
_TMP_BYTES = 64 * _MIB
# What commands may see of the host, read-only. /etc is a fresh directory with these few public files.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "resolv.conf", "gai.conf", "protocols",
    "services", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "ssl",
    "ca-certificates", "mime.types", "os-release", "debian_version",
)  # fmt: skip
DOCKER_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock")
UNSAFE_HINT = (
    "AGENT_WORKER_SANDBOX_UNSAFE_DEV=true runs commands as plain subprocesses of the worker "
    "(development on trusted code only)"
)
# Run inside the sandbox at start: one FAIL line per promise the isolation does not keep.
_PROBE = r"""
cat /etc/shadow >/dev/null 2>&1 && echo "FAIL host secret /etc/shadow is readable"
if [ -e root-only ] && cat root-only >/dev/null 2>&1; then echo "FAIL a root-only file is readable"; fi
for s in /run/docker.sock /var/run/docker.sock; do
  [ -e "$s" ] && echo "FAIL Docker socket $s is visible"
done
[ "$(id -u)" = 0 ] && echo "FAIL commands run as root"
grep -Ev '^ *(Inter-|face|lo:)' /proc/net/dev | grep -q . && echo "FAIL network beyond loopback"
for limit in "Max address space" "Max file size"; do
  grep "^$limit" /proc/self/limits | grep -q unlimited && echo "FAIL no cap on $limit"
done
nproc=$(grep '^Max processes' /proc/self/limits | tr -s ' ' | cut -d ' ' -f 3)
case "$nproc" in
  ''|*[!0-9]*) echo "FAIL no cap on processes";;
  *) [ "$nproc" -gt 65536 ] && echo "FAIL no cap on processes";;
esac
echo PROBED
"""


def bwrap_available() -> bool:
    """Whether bubblewrap is installed and can create an isolated sandbox here."""
    return shutil.which("bwrap") is not None and not isolation_problems(Path(tempfile.gettempdir()))


def isolation_problems(root: Path) -> list[str]:
    """What the bubblewrap sandbox fails to hide or cap here (empty: isolation proven).

    Runs a probe command the way every command runs, in a scratch work dir under ``root``.
    """
    if shutil.which("bwrap") is None:
        return ["bubblewrap is not installed (apt-get install bubblewrap)"]
    missing = [tool for tool in ("prlimit", "timeout") if shutil.which(tool) is None]
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        missing.append("setpriv")
    if missing:
        return [f"{', '.join(missing)} not installed (util-linux, coreutils)"]
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".probe-", dir=root))
    try:
        work = scratch / "work"
        work.mkdir()
        work.chmod(0o777)
        secret = work / "root-only"
        secret.write_text("secret")
        secret.chmod(0o600)
        if os.geteuid() != 0:
            secret.unlink()  # only root can make a root-only file; such a worker cannot read them anyway
        argv = _bwrap_argv(work, SandboxSpec(), ["sh", "-c", _PROBE], timeout=20)
        try:
            done = subprocess.run(argv, cwd=work, capture_output=True, timeout=30, text=True)
        except (OSError, subprocess.SubprocessError) as err:
            return [f"bubblewrap could not run: {err}"]
        if "PROBED" not in done.stdout:
            reason = (done.stderr or done.stdout).strip()[-300:]
            return [f"bubblewrap could not create the sandbox: {reason or f'exit {done.returncode}'}"]
        return [line[5:] for line in done.stdout.splitlines() if line.startswith("FAIL ")]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _bwrap_argv(
    work: Path, spec: SandboxSpec, command: list[str], timeout: float, *, cgroup_capped: bool = False
) -> list[str]:
    """The argv that runs ``command`` in bubblewrap with ``work`` as ``/work`` (``cgroup_capped``:
    a cgroup caps its processes, so a root worker's shared ``RLIMIT_NPROC`` is only a backstop)."""
    argv = ["bwrap"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--dir", "/etc"]
    for name in _ETC_FILES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += [
        "--bind", str(work), "/work", "--chdir", "/work",
        "--size", str(_TMP_BYTES), "--perms", "1777", "--tmpfs", "/tmp",
        "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/",
        "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/work",
    ]  # fmt: skip
    if not spec.network:
        argv.append("--unshare-net")
    nproc = _NPROC_BACKSTOP if cgroup_capped and os.geteuid() == 0 else spec.pids
    limits = [
        "prlimit",
        f"--nproc={nproc}",
        f"--as={spec.memory_mb * _MIB}",
        f"--fsize={spec.work_dir_mb * _MIB}",
        "--core=0",
        "--",
    ]
    # Killed from inside too, so the command dies even if the worker vanishes.
    inner = [*limits, "timeout", "-s", "KILL", f"{timeout:g}", *command]
    if os.geteuid() == 0:
        # Privileged bubblewrap, then the real nobody: in a user namespace nobody would map to root,
        # which reads root's files and escapes RLIMIT_NPROC.
        drop = ["setpriv", f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups"]
        drop += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        return [*argv, "--", *drop, *inner]
    argv += ["--unshare-user", "--uid", _NOBODY, "--gid", _NOBODY, "--cap-drop", "ALL"]
    return [*argv, "--", *inner]


class ProcessSandbox:
    """Work dirs under ``root``, one per task, commands isolated by bubblewrap (proven at start).

    Raises:
        SandboxError: ``sandbox_unisolated`` when isolation cannot be proven (or ``none`` is asked)
            without ``unsafe_dev``; the message says what is missing and how to fix it.
    """

    backend = SandboxBackend.PROCESS

    def __init__(
        self,
        root: Path,
        isolation: Literal["auto", "bwrap", "none"] = "auto",
        *,
        unsafe_dev: bool = False,
        namespace: str | None = None,
        deployment: str | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.namespace, self.deployment = namespace, deployment
        if isolation != "none":
            problems = isolation_problems(self.root)
            if not problems:
                isolation = "bwrap"
            elif isolation == "bwrap" or not unsafe_dev:
                raise SandboxError(
                    "the process sandbox tier cannot prove its isolation here: "
                    + "; ".join(problems)
                    + ". Fix: install bubblewrap (and util-linux) where it can create namespaces, or "
                    "use AGENT_WORKER_SANDBOX_BACKEND=docker (agent-worker sandbox-image) or e2b; "
                    f"only for development on trusted code: {UNSAFE_HINT}",
                    code="sandbox_unisolated",
                    operation="sandbox.create",
                    retryable="no",
                )
            else:
                isolation = "none"
                log.error("process sandbox cannot prove its isolation", problems=problems)
        if isolation == "none" and not unsafe_dev:
            raise SandboxError(
                "process_isolation=none runs model code as plain subprocesses of the worker, with its "
                f"files, network and Docker socket; refused. {UNSAFE_HINT}",
                code="sandbox_unisolated",
                operation="sandbox.create",
                retryable="no",
            )
        self.isolation = isolation
        self.cgroups = PidsCgroups.here()
        if isolation == "none":
            log.error(
                "UNSAFE: process sandbox tier without isolation (sandbox_unsafe_dev): commands run as "
                "plain subprocesses of this worker; development on trusted code only",
                root=str(self.root),
            )
        else:
            log.warning(
                "process sandbox tier is for trusted development use only",
                isolation=self.isolation,
                root=str(self.root),
                pids_cap="cgroup" if self.cgroups else "rlimit",
            )

    def _dir(self, sandbox_id: str) -> Path:
        return self.root / sandbox_id

    def _work(self, sandbox_id: str) -> Path:
        return self._dir(sandbox_id) / "work"

    async def create(self, input: CreateSandboxInput, inputs: dict[str, bytes]) -> SandboxRef:
        sandbox_id = sandbox_id_for(input.task_id, input.run_chain)
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
                        "agent-worker.isolation": self.isolation,
                        **self._owner_labels(),
                    }
                )
            )
        for name, data in inputs.items():
            target = self._inside(work, name, "sandbox.create")
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
                if self.isolation == "bwrap" and os.geteuid() == 0:
                    os.chown(target, int(_NOBODY), int(_NOBODY))  # commands run as the real nobody
        return SandboxRef(
            backend=self.backend, sandbox_id=sandbox_id, isolation=self.isolation, trusted_only=True
        )

    def _owner_labels(self) -> dict[str, str]:
        owner = {LABEL_NAMESPACE: self.namespace, LABEL_DEPLOYMENT: self.deployment}
        return {k: v for k, v in owner.items() if v is not None}

    def _argv(self, input: ExecInput, timeout: float, cgroup: Path | None) -> list[str]:
        work = self._work(input.sandbox.sandbox_id)
        if self.isolation == "none":
            # UNSAFE (sandbox_unsafe_dev): the worker's user, files and network. Killed from inside
            # too, so the command dies even if the worker vanishes.
            argv = ["timeout", "-s", "KILL", f"{timeout:g}", *input.command.argv]
        else:
            argv = _bwrap_argv(
                work, input.spec, input.command.argv, timeout, cgroup_capped=cgroup is not None
            )
        return argv if cgroup is None else PidsCgroups.argv(cgroup, argv)

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
        cgroup = await asyncio.to_thread(self.cgroups.make, input.spec.pids) if self.cgroups else None
        try:
            return await self._run(input, work, cgroup, limit=timeout)
        finally:
            if cgroup is not None:
                # What the command left running (its own cap's worth at most) goes with it.
                await asyncio.shield(asyncio.to_thread(PidsCgroups.remove, cgroup))

    async def _run(self, input: ExecInput, work: Path, cgroup: Path | None, *, limit: float) -> ExecOutcome:
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *self._argv(input, limit, cgroup),
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
                _communicate(proc, stdin), timeout=limit + _OUTSIDE_GRACE_SECONDS
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
        timed_out = proc.returncode in (124, 137, -9) and time.monotonic() - started >= limit
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
            if any(data.get(k) != v for k, v in self._owner_labels().items()):
                continue  # another namespace's or deployment's sandbox: not ours to judge
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
