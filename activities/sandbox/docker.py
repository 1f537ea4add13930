"""The ``docker`` sandbox tier: one hardened container per task, for untrusted code.

Each container runs the configured image with:

- no network unless the task's spec grants it (``network_mode=none``);
- a read-only root, a private ``/tmp`` (tmpfs), and a writable work dir ``/sandbox/work`` on a named
  volume (``<sandbox id>-work``) that is a tmpfs of ``work_dir_mb``: a command writing past it gets
  "No space left on device" and the host's disk is never touched (overlay2 on ext4 has no per-volume
  quota). Its bytes are memory, so the container's memory limit is ``memory_mb + work_dir_mb``; the
  work dir lives as long as the container runs (a container restarted by its daemon gets its inputs
  again, not earlier commands' files);
- memory (no swap), CPU and pids limits, every capability dropped, ``no-new-privileges``, a non-root
  user, an init process reaping zombies, and no environment from the host;
- labels carrying task id, tenant, run id, backend, creation time, and the owning Temporal namespace
  and deployment (the reaper judges only its own), for reaping.

The container name is the task's sandbox id, so a retried create (or another worker) finds the
container instead of making a second. A read-only root needs a way in: inputs are written with the
archive API into the volume (mounted at ``/sandbox``) as ``work/<name>``, owned by the sandbox user,
which also creates the work dir with the right owner; outputs come back the same way.

Commands run under ``timeout -s KILL`` inside the container (they die even if the worker vanishes),
in a process group the activity kills on its own timeout and on cancellation. A command killed by the
container's memory limit is reported ``oom_killed`` (from the memory cgroup's ``oom_kill`` counter).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import socket
import tarfile
import time
from datetime import UTC, datetime
from typing import Any

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
from agent_worker.schemas.sandbox import CreateSandboxInput, ExecInput, SandboxBackend, SandboxRef

log = structlog.get_logger(__name__)

MOUNT = "/sandbox"
WORK_DIR = f"{MOUNT}/work"
SANDBOX_USER = "65534:65534"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_OUTPUT_HARD_LIMIT = 64 * 1024 * 1024
_OUTSIDE_GRACE_SECONDS = 5.0
# How long a container must stay up after a command was SIGKILLed before the kill counts as the
# command's own rather than its container being removed.
_SETTLE_SECONDS = 1.5
# Runs the command in its own process group (timeout(1) leads one), recording timeout's pid first.
_WRAPPER = 'echo $$ > "$AW_PIDFILE"; exec timeout -s KILL "$AW_TIMEOUT" "$@"'
_OOM_COUNT = (
    "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"
    " | awk '$1 == \"oom_kill\" {print $2}'"
)


def _docker() -> Any:
    try:
        import docker
    except ImportError:
        raise SandboxError(
            "the docker sandbox needs the docker package: pip install 'agent-worker[docker]'",
            code="backend_unavailable",
            operation="sandbox.create",
            retryable="no",
        ) from None
    return docker


def docker_available(image: str) -> str | None:
    """Why the docker tier cannot run here (None when it can): daemon reachable, image present."""
    try:
        client = _docker().from_env(timeout=5)
        client.ping()
    except Exception as err:  # any failure means the tier is unavailable; say why
        return f"no Docker daemon: {err}"
    try:
        client.images.get(image)
    except Exception:
        return f"image {image!r} is not present (build it: agent-worker sandbox-image)"
    return None


class DockerSandbox:
    """Hardened containers from ``image`` on the daemon ``docker.from_env()`` finds."""

    backend = SandboxBackend.DOCKER

    def __init__(
        self,
        image: str,
        *,
        user: str = SANDBOX_USER,
        namespace: str | None = None,
        deployment: str | None = None,
    ) -> None:
        self.image = image
        self.user = user
        # Labels every container gets and ``list`` filters on (None: not labelled, not filtered).
        owner = {LABEL_NAMESPACE: namespace, LABEL_DEPLOYMENT: deployment}
        self.owner_labels = {k: v for k, v in owner.items() if v is not None}
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _docker().from_env(timeout=60)
        return self._client

    # ---- create --------------------------------------------------------------------------------

    async def create(self, input: CreateSandboxInput, inputs: dict[str, bytes]) -> SandboxRef:
        return await asyncio.to_thread(self._create, input, inputs)

    def _create(self, input: CreateSandboxInput, inputs: dict[str, bytes]) -> SandboxRef:
        errors = _docker().errors
        name = sandbox_id_for(input.task_id, input.run_chain)
        try:
            container = self.client.containers.get(name)
            if container.status != "running":
                container.start()
                # The work dir is a tmpfs: a restarted container starts with it empty.
                container.put_archive(MOUNT, _tar(inputs, directory="work"))
            log.info("reusing sandbox container", sandbox_id=name, task_id=input.task_id)
        except errors.NotFound:
            try:
                container = self._new_container(name, input)
            except errors.APIError as err:
                if getattr(err, "status_code", None) != 409:  # 409: a concurrent create won the name
                    raise _sandbox_error(err, "sandbox.create") from err
                container = self.client.containers.get(name)
            container.start()
            container.put_archive(MOUNT, _tar(inputs, directory="work"))
        except errors.APIError as err:
            raise _sandbox_error(err, "sandbox.create") from err
        return SandboxRef(
            backend=self.backend,
            sandbox_id=name,
            provider_id=container.id,
            isolation="docker",
            trusted_only=False,
        )

    def _new_container(self, name: str, input: CreateSandboxInput) -> Any:
        docker = _docker()
        spec = input.spec
        labels = {
            LABEL_TASK: input.task_id,
            LABEL_TENANT: input.tenant,
            LABEL_RUN: input.run_id,
            LABEL_BACKEND: "docker",
            LABEL_CREATED: datetime.now(UTC).isoformat(),
            **self.owner_labels,
        }
        uid, gid = SANDBOX_USER.split(":")
        volume = self.client.volumes.create(
            name=f"{name}-work",
            driver="local",
            # A size-capped tmpfs: overlay2 and vfs offer no per-volume quota on ext4.
            driver_opts={
                "type": "tmpfs",
                "device": "tmpfs",
                "o": f"size={spec.work_dir_mb}m,uid={uid},gid={gid},mode=0755,nosuid,nodev",
            },
            labels=labels,
        )
        return self.client.containers.create(
            self.image,
            ["sleep", "infinity"],
            name=name,
            labels=labels,
            user=self.user,
            environment={"PATH": SANDBOX_PATH, "HOME": WORK_DIR},
            network_mode="bridge" if spec.network else "none",
            read_only=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=64m,mode=1777"},
            mounts=[docker.types.Mount(target=MOUNT, source=volume.name, type="volume")],
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            # The work dir's tmpfs pages count against the container's memory.
            mem_limit=f"{spec.memory_mb + spec.work_dir_mb}m",
            memswap_limit=f"{spec.memory_mb + spec.work_dir_mb}m",
            nano_cpus=int(spec.cpus * 1e9),
            pids_limit=spec.pids,
            init=True,
        )

    # ---- exec ----------------------------------------------------------------------------------

    def _running(self, ref: SandboxRef, operation: str) -> Any:
        errors = _docker().errors
        try:
            container = self.client.containers.get(ref.sandbox_id)
        except errors.NotFound:
            container = None
        if container is None or container.status != "running":
            raise SandboxError(
                f"sandbox {ref.sandbox_id} is gone (its container was removed or stopped)",
                code="sandbox_missing",
                operation=operation,
                retryable="no",
            )
        return container

    async def exec(self, input: ExecInput) -> ExecOutcome:
        container = await asyncio.to_thread(self._running, input.sandbox, "sandbox.exec")
        timeout = input.command.timeout_seconds or input.spec.command_timeout_seconds
        pidfile = f"/tmp/.aw-{input.call_id[-40:].replace('/', '_')}.pid"
        api = self.client.api
        exec_id = (
            await asyncio.to_thread(
                api.exec_create,
                container.id,
                ["sh", "-c", _WRAPPER, "aw", *input.command.argv],
                stdin=True,
                user=self.user,
                workdir=WORK_DIR,
                environment={"AW_PIDFILE": pidfile, "AW_TIMEOUT": f"{timeout:g}"},
            )
        )["Id"]
        stdin = (input.command.stdin or "").encode()
        started = time.monotonic()
        run = asyncio.ensure_future(asyncio.to_thread(_run_exec, api, exec_id, stdin))
        try:
            out, err = await asyncio.wait_for(asyncio.shield(run), timeout + _OUTSIDE_GRACE_SECONDS)
        except asyncio.CancelledError:
            await self._kill_and_drain(container, pidfile, run)
            raise
        except TimeoutError:
            await self._kill_and_drain(container, pidfile, run)
            return ExecOutcome(None, b"", b"killed: command exceeded its timeout", timed_out=True)
        exit_code = await asyncio.to_thread(self._exit_code, input.sandbox, exec_id)
        timed_out = exit_code in (124, 137) and time.monotonic() - started >= timeout
        oom = exit_code == 137 and not timed_out and await asyncio.to_thread(self._oom_since_last, container)
        return ExecOutcome(exit_code, out, err, timed_out=timed_out, oom_killed=oom)

    def _exit_code(self, ref: SandboxRef, exec_id: str) -> int | None:
        """The finished exec's exit code. A command whose container vanished under it (removed from
        outside, its host lost) raises ``sandbox_missing``: its output is not the command's.

        A removal first SIGKILLs everything in the container, so the command may end with 137 while
        the container still reads "running" for a moment: a kill is only taken as the command's own
        (out of memory, its timeout) once the container has stayed up for ``_SETTLE_SECONDS``.
        """
        try:
            exit_code = self.client.api.exec_inspect(exec_id)["ExitCode"]
        except _docker().errors.NotFound:
            exit_code = None
        if exit_code is None or exit_code == 137:
            settled = time.monotonic() + _SETTLE_SECONDS
            while True:
                self._running(ref, "sandbox.exec")
                if time.monotonic() >= settled:
                    break
                time.sleep(0.2)
        return exit_code

    async def _kill_and_drain(self, container: Any, pidfile: str, run: asyncio.Future[Any]) -> None:
        """Kill the command's process group from outside and wait for its stream to end."""

        def kill() -> None:
            with contextlib.suppress(Exception):
                # SIGALRM makes timeout(1) act as if the time were up: it SIGKILLs its whole process
                # group (a plain `kill` of the group is not portable across shells).
                container.exec_run(["sh", "-c", f'kill -ALRM "$(cat {pidfile})"'], user=self.user)

        await asyncio.shield(asyncio.to_thread(kill))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(run), 10)

    def _oom_since_last(self, container: Any) -> bool:
        """Whether the memory cgroup killed something since the last check (counter kept in /tmp)."""
        script = (
            f"now=$({_OOM_COUNT}); last=$(cat /tmp/.aw-oom 2>/dev/null || echo 0); "
            'echo "$now" > /tmp/.aw-oom; echo "$last $now"'
        )
        result = container.exec_run(["sh", "-c", script], user=self.user)
        try:
            last, now = (int(v) for v in result.output.decode().split())
        except ValueError:
            return False
        return now > last

    # ---- files, destroy, list ------------------------------------------------------------------

    async def read_file(self, ref: SandboxRef, name: str) -> bytes | None:
        path = posixpath.normpath(posixpath.join(WORK_DIR, name))
        if not path.startswith(WORK_DIR + "/"):
            raise SandboxError(
                f"{name!r} is outside the work dir", code="bad_path", operation="sandbox.exec", retryable="no"
            )
        container = await asyncio.to_thread(self._running, ref, "sandbox.exec")
        return await asyncio.to_thread(_get_file, container, path)

    async def destroy(self, ref: SandboxRef) -> bool:
        return await asyncio.to_thread(self._destroy, ref.sandbox_id)

    def _destroy(self, sandbox_id: str) -> bool:
        errors = _docker().errors
        existed = False
        try:
            self.client.containers.get(sandbox_id).remove(force=True, v=True)
            existed = True
        except errors.NotFound:
            pass
        with contextlib.suppress(errors.NotFound):
            self.client.volumes.get(f"{sandbox_id}-work").remove(force=True)
        return existed

    async def list(self) -> list[SandboxInfo]:
        wanted = [f"{LABEL_BACKEND}=docker", *(f"{k}={v}" for k, v in self.owner_labels.items())]
        # The list endpoint alone, never an inspect per container: the daemon lists a container a
        # moment before it can inspect it (while creating it) and after (while removing it), so a
        # reaper that inspected what it listed would fail on a sandbox being made or destroyed.
        containers = await asyncio.to_thread(self.client.api.containers, all=True, filters={"label": wanted})
        now = datetime.now(UTC)
        found = []
        for container in containers:
            labels = container.get("Labels") or {}
            try:
                age = (now - datetime.fromisoformat(labels[LABEL_CREATED])).total_seconds()
            except (KeyError, ValueError):
                age = float("inf")
            name = container["Names"][0].lstrip("/")  # the API's names carry a leading slash
            found.append(SandboxInfo(name, labels.get(LABEL_TASK), age, self.backend, container["Id"]))
        return found


def _run_exec(api: Any, exec_id: str, stdin: bytes) -> tuple[bytes, bytes]:
    """Start the exec, feed stdin, and collect its (capped) stdout and stderr until it ends."""
    from docker.utils.socket import frames_iter

    sock = api.exec_start(exec_id, socket=True)
    raw = getattr(sock, "_sock", sock)
    try:
        if stdin:
            raw.sendall(stdin)
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_WR)
        out, err = bytearray(), bytearray()
        for stream, data in frames_iter(sock, tty=False):
            target = out if stream == 1 else err
            if len(target) < _OUTPUT_HARD_LIMIT:
                target += data[: _OUTPUT_HARD_LIMIT - len(target)]
        return bytes(out), bytes(err)
    finally:
        sock.close()


def _tar(files: dict[str, bytes], *, directory: str) -> bytes:
    """A tar of ``directory/`` and its files, owned by the sandbox user."""
    uid, gid = (int(v) for v in SANDBOX_USER.split(":"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        entry = tarfile.TarInfo(directory)
        entry.type, entry.mode, entry.uid, entry.gid = tarfile.DIRTYPE, 0o755, uid, gid
        tar.addfile(entry)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{directory}/{name}")
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, gid
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _get_file(container: Any, path: str) -> bytes | None:
    errors = _docker().errors
    try:
        chunks, _stat = container.get_archive(path)
    except errors.NotFound:
        return None
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        member = tar.next()
        if member is None or not member.isfile():
            return None  # a directory or a link is not an output file
        extracted = tar.extractfile(member)
        return extracted.read() if extracted else None


def _sandbox_error(err: Exception, operation: str) -> SandboxError:
    status = getattr(err, "status_code", None)
    retryable = "yes" if status is None or status >= 500 else "no"
    return SandboxError(f"docker: {err}", code="docker_error", operation=operation, retryable=retryable)
