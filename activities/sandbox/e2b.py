"""The ``e2b`` sandbox tier: one E2B cloud sandbox (a Firecracker microVM) per task, for untrusted code.

Built on the ``e2b`` SDK's async API, an optional extra (``pip install 'agent-worker[e2b]'``) imported
on first use. The connection is configured explicitly: the settings given to ``E2BSandbox`` are bound
to the SDK's own ``e2b.E2B`` client, whose ``AsyncSandbox`` uses them (``api_key``, ``domain``, and
``api_url`` for a different API host such as a self-hosted control plane or a local stand-in) instead
of the ``E2B_*`` environment variables.

Lifecycle (create, list, reuse, destroy) goes through the E2B REST API only:

- every sandbox carries the package's labels as E2B metadata (task, tenant, run, backend, creation
  time), and ``list`` finds them by metadata, running or paused, for the reaper;
- ``create`` is idempotent twice over: it first looks for the task's sandbox by metadata and reuses
  it, and it creates with an ``Idempotency-Key`` (the task's sandbox id) so that two creates racing
  past that look-up still get one sandbox;
- a sandbox lives ``lifetime_seconds`` after its last command (every command extends it), then is
  killed, or paused when ``on_timeout="pause"`` (the next command resumes it).

Files and commands go through the in-sandbox daemon (envd): inputs are written to ``WORK_DIR``, and
each command runs there under ``timeout -s KILL`` (so it dies even if the worker vanishes), killed
from outside (its process group) at its timeout and on cancellation. A create with no inputs does
not touch envd. Memory, CPU and pids limits come from the E2B template, not from the task's spec.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import posixpath
import shlex
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import structlog
from agent_worker.activities.errors import Retryable, SandboxError
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

if TYPE_CHECKING:
    from agent_worker.schemas.config import WorkerConfig

log = structlog.get_logger(__name__)

WORK_DIR = "/home/user/work"
ISOLATION = "e2b-microvm"
# The task's sandbox id, so a ref that lost its provider id can still be found.
LABEL_SANDBOX = "agent-worker.sandbox_id"
_OUTPUT_HARD_LIMIT = 64 * 1024 * 1024
_OUTSIDE_GRACE_SECONDS = 5.0
_KILL_TIMEOUT_SECONDS = 15.0


def _e2b(operation: str = "sandbox.create") -> Any:
    try:
        import e2b
    except ImportError:
        raise SandboxError(
            "the e2b sandbox needs the e2b package: pip install 'agent-worker[e2b]'",
            code="backend_unavailable",
            operation=operation,
            retryable="no",
        ) from None
    return e2b


class E2BSandbox:
    """E2B sandboxes from ``template``, reached with the given account settings.

    Args:
        api_key: The E2B API key.
        template: The template (name or id) sandboxes are created from; it must have ``timeout``
            (coreutils) and whatever the agents' commands need.
        domain: The E2B domain (``e2b.app`` when None).
        api_url: The API's URL, when it is not ``https://api.<domain>`` (self-hosted, a test stand-in).
            The SDK's ``api_url`` option (``E2B_API_URL``), which it plans to drop in its next major
            version; the ``e2b`` extra is pinned below that.
        lifetime_seconds: How long a sandbox lives after its last command (E2B caps it by plan).
        on_timeout: What E2B does at the end of a sandbox's lifetime: ``kill`` it, or ``pause`` it
            (keeping its files; the next command resumes it).
        request_timeout: Timeout of each API request, in seconds (the SDK's default when None).
        retries: How often the SDK retries a rate-limited or unavailable API (its default when None).
    """

    backend = SandboxBackend.E2B

    def __init__(
        self,
        *,
        api_key: str,
        template: str = "base",
        domain: str | None = None,
        api_url: str | None = None,
        lifetime_seconds: int = 3600,
        on_timeout: Literal["kill", "pause"] = "kill",
        request_timeout: float | None = None,
        retries: int | None = None,
        namespace: str | None = None,
        deployment: str | None = None,
    ) -> None:
        # Metadata every sandbox gets and ``list`` filters on: the reaper judges only its own.
        owner = {LABEL_NAMESPACE: namespace, LABEL_DEPLOYMENT: deployment}
        self.owner_labels = {k: v for k, v in owner.items() if v is not None}
        self.template = template
        self.lifetime_seconds = lifetime_seconds
        self.on_timeout = on_timeout
        params: dict[str, Any] = {
            "api_key": api_key,
            "domain": domain,
            "api_url": api_url,
            "request_timeout": request_timeout,
            "retries": retries,
        }
        self._params = {k: v for k, v in params.items() if v is not None}
        self._bound: Any = None

    @classmethod
    def from_config(cls, config: WorkerConfig, namespace: str | None = None) -> E2BSandbox:
        """The backend for a worker's config (``E2B_API_KEY``, ``E2B_DOMAIN``, ``e2b_template``),
        its sandboxes labelled with ``namespace`` and the config's deployment."""
        if config.e2b_api_key is None:
            raise SandboxError(
                "the e2b sandbox needs E2B_API_KEY",
                code="backend_unavailable",
                operation="sandbox.create",
                retryable="no",
            )
        return cls(
            api_key=config.e2b_api_key.get_secret_value(),
            domain=config.e2b_domain,
            template=config.e2b_template,
            namespace=namespace,
            deployment=config.sandbox_deployment,
        )

    @property
    def sandboxes(self) -> Any:
        """The SDK's ``AsyncSandbox`` class, bound to this backend's settings by an ``e2b.E2B`` client."""
        if self._bound is None:
            self._bound = _e2b().E2B(**self._params).AsyncSandbox
        return self._bound

    # ---- create --------------------------------------------------------------------------------

    async def create(self, input: CreateSandboxInput, inputs: dict[str, bytes]) -> SandboxRef:
        sandbox_id = sandbox_id_for(input.task_id, input.run_chain)
        files = [{"path": _inside(name, "sandbox.create"), "data": data} for name, data in inputs.items()]
        with _translated("sandbox.create"):
            existing = await self._find(input.task_id, sandbox_id)
            if existing is not None:
                provider_id = existing.sandbox_id
                log.info("reusing e2b sandbox", sandbox_id=sandbox_id, provider_id=provider_id)
                sandbox = await self._connect(provider_id) if files else None
            else:
                sandbox = await self._new_sandbox(sandbox_id, input)
                provider_id = sandbox.sandbox_id
                log.info("created e2b sandbox", sandbox_id=sandbox_id, provider_id=provider_id)
            if sandbox is not None:
                await sandbox.files.write_files(files)
        return SandboxRef(
            backend=self.backend,
            sandbox_id=sandbox_id,
            provider_id=provider_id,
            isolation=ISOLATION,
            trusted_only=False,
        )

    async def _new_sandbox(self, sandbox_id: str, input: CreateSandboxInput) -> Any:
        metadata = {
            LABEL_TASK: input.task_id,
            LABEL_TENANT: input.tenant,
            LABEL_RUN: input.run_id,
            LABEL_BACKEND: self.backend.value,
            LABEL_CREATED: datetime.now(UTC).isoformat(),
            LABEL_SANDBOX: sandbox_id,
            **self.owner_labels,
        }
        return await self.sandboxes.create(
            template=self.template,
            timeout=self.lifetime_seconds,
            metadata=metadata,
            allow_internet_access=input.spec.network,
            lifecycle={"on_timeout": self.on_timeout},
            # The API answers a repeated key with the sandbox the first request created.
            idempotency_key=sandbox_id,
        )

    async def _find(self, task_id: str, sandbox_id: str) -> Any:
        """The task's sandbox (the oldest, should a race have made two), running before paused. Found
        by its id too: a reused task id (another run chain) must not find an earlier run's sandbox."""
        found = await self._query(
            {LABEL_TASK: task_id, LABEL_SANDBOX: sandbox_id, LABEL_BACKEND: self.backend.value}
        )
        if len(found) > 1:
            log.warning("task has several e2b sandboxes", task_id=task_id, count=len(found))
        running = self._states().RUNNING
        found.sort(key=lambda info: (info.state != running, info.started_at))
        return found[0] if found else None

    async def _query(self, metadata: dict[str, str]) -> list[Any]:
        e2b = _e2b()
        states = self._states()
        query = e2b.SandboxQuery(metadata=metadata, state=[states.RUNNING, states.PAUSED])
        paginator = self.sandboxes.list(query=query)
        found: list[Any] = []
        while paginator.has_next:
            found += await paginator.next_items()
        return found

    @staticmethod
    def _states() -> Any:
        return _e2b().SandboxState

    async def _connect(self, provider_id: str) -> Any:
        """The running sandbox (resumed if paused), its lifetime extended from now."""
        return await self.sandboxes.connect(provider_id, timeout=self.lifetime_seconds)

    # ---- exec ----------------------------------------------------------------------------------

    async def exec(self, input: ExecInput) -> ExecOutcome:
        timeout = input.command.timeout_seconds or input.spec.command_timeout_seconds
        out, err = _Output(), _Output()
        with _translated("sandbox.exec"):
            sandbox = await self._connect(_provider_id(input.sandbox))
            stdin = "/dev/null"
            if input.command.stdin is not None:
                stdin = f"/tmp/.aw-stdin-{hashlib.sha256(input.call_id.encode()).hexdigest()[:16]}"
                await sandbox.files.write(stdin, input.command.stdin.encode())
            started = time.monotonic()
            handle = await sandbox.commands.run(
                _script(input.command.argv, timeout, stdin),
                background=True,
                on_stdout=out.add,
                on_stderr=err.add,
                # A backstop only: the activity kills the command first (below).
                timeout=timeout + 2 * _OUTSIDE_GRACE_SECONDS,
                retain_output=False,
            )
        finished = False
        try:
            exit_code, error = await asyncio.wait_for(_wait(handle), timeout + _OUTSIDE_GRACE_SECONDS)
            finished = True
        except TimeoutError:
            killed = err.data() + b"\nkilled: command exceeded its timeout"
            return ExecOutcome(None, out.data(), killed.lstrip(b"\n"), timed_out=True)
        finally:
            if not finished:
                # The timeout, a cancelled activity or a lost stream: the command must not run on.
                await asyncio.shield(_kill(sandbox, handle.pid))
                with contextlib.suppress(Exception):
                    await handle.disconnect()
        # envd reports a command ended by a signal as -1 ("signal: killed"); timeout(1) dies with the
        # command it KILLs, so the elapsed time tells a timeout from a command killed otherwise.
        signalled = exit_code is not None and exit_code < 0
        timed_out = (signalled or exit_code in (124, 137)) and time.monotonic() - started >= timeout
        if signalled:
            log.info("e2b command ended by a signal", call_id=input.call_id, error=error, timed_out=timed_out)
        return ExecOutcome(None if signalled else exit_code, out.data(), err.data(), timed_out=timed_out)

    # ---- files, destroy, list ------------------------------------------------------------------

    async def read_file(self, ref: SandboxRef, name: str) -> bytes | None:
        e2b = _e2b("sandbox.exec")
        path = _inside(name, "sandbox.exec")
        with _translated("sandbox.exec"):
            sandbox = await self._connect(_provider_id(ref))
            try:
                return bytes(await sandbox.files.read(path, format="bytes"))
            except (e2b.FileNotFoundException, e2b.InvalidArgumentException):
                # Missing, or not a regular file (envd refuses to read a directory).
                return None

    async def destroy(self, ref: SandboxRef) -> bool:
        with _translated("sandbox.destroy"):
            provider_ids = [ref.provider_id]
            if not ref.provider_id:
                found = await self._query({LABEL_SANDBOX: ref.sandbox_id})
                provider_ids = [info.sandbox_id for info in found]
            existed = False
            for provider_id in provider_ids:
                existed = await self.sandboxes.kill(provider_id) or existed
        return existed

    async def list(self) -> list[SandboxInfo]:
        with _translated("sandbox.list"):
            found = await self._query({LABEL_BACKEND: self.backend.value, **self.owner_labels})
        now = datetime.now(UTC)
        infos = []
        for info in found:
            metadata = info.metadata or {}
            task_id = metadata.get(LABEL_TASK)
            try:
                created = datetime.fromisoformat(metadata[LABEL_CREATED])
            except (KeyError, ValueError):
                created = info.started_at
            infos.append(
                SandboxInfo(
                    sandbox_id=metadata.get(LABEL_SANDBOX) or info.sandbox_id,
                    task_id=task_id,
                    age_seconds=(now - created).total_seconds(),
                    backend=self.backend,
                    provider_id=info.sandbox_id,
                )
            )
        return infos


class _Output:
    """A command's output as it streams in, kept up to the hard limit."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0

    def add(self, text: str) -> None:
        # The SDK hands output over decoded (invalid UTF-8 replaced); encode it back.
        data = text.encode()
        if self._size < _OUTPUT_HARD_LIMIT:
            self._chunks.append(data[: _OUTPUT_HARD_LIMIT - self._size])
        self._size += len(data)

    def data(self) -> bytes:
        return b"".join(self._chunks)


def _script(argv: list[str], timeout: float, stdin: str) -> str:
    """The shell line envd runs: in the work dir, under an in-sandbox KILL timeout.

    ``exec`` keeps the pid envd reports for timeout(1), which leads its own process group, so
    killing that group kills the command and everything it started.
    """
    return (
        f"mkdir -p {WORK_DIR} && cd {WORK_DIR} && "
        f"exec timeout -s KILL {timeout:g} {shlex.join(argv)} < {shlex.quote(stdin)}"
    )


async def _wait(handle: Any) -> tuple[int | None, str | None]:
    """The command's exit code and envd's error text; a non-zero exit is an outcome, not an error."""
    e2b = _e2b()
    with _translated("sandbox.exec"):
        try:
            result = await handle.wait()
        except e2b.CommandExitException as exc:
            return exc.exit_code, exc.error
        return result.exit_code, result.error


async def _kill(sandbox: Any, pid: int) -> None:
    """Kill the command's process group, then the command itself, as far as the sandbox answers.

    Best effort by design: when the sandbox cannot be reached, the in-sandbox timeout still ends it.
    """
    with contextlib.suppress(Exception):
        await sandbox.commands.run(f"kill -KILL -- -{pid} 2>/dev/null; true", timeout=_KILL_TIMEOUT_SECONDS)
    with contextlib.suppress(Exception):
        await sandbox.commands.kill(pid, request_timeout=_KILL_TIMEOUT_SECONDS)


def _inside(name: str, operation: str) -> str:
    """``WORK_DIR/name``, refusing names that lead outside the work dir."""
    path = posixpath.normpath(posixpath.join(WORK_DIR, name))
    if not path.startswith(WORK_DIR + "/") or "\0" in name:
        raise SandboxError(
            f"{name!r} is outside the work dir", code="bad_path", operation=operation, retryable="no"
        )
    return path


def _provider_id(ref: SandboxRef) -> str:
    if not ref.provider_id:
        raise SandboxError(
            f"sandbox {ref.sandbox_id} has no E2B sandbox id",
            code="sandbox_missing",
            operation="sandbox.exec",
            retryable="no",
        )
    return ref.provider_id


@contextlib.contextmanager
def _translated(operation: str) -> Iterator[None]:
    """Turn the SDK's errors (and network failures) into ``SandboxError``s with a code."""
    e2b = _e2b(operation)
    import httpx  # a dependency of the SDK

    try:
        yield
    except SandboxError:
        raise
    except e2b.CommandExitException:
        raise
    except Exception as err:
        translated = _classify(err, e2b, httpx)
        if translated is None:
            raise
        code, retryable = translated
        raise SandboxError(f"e2b: {err}", code=code, operation=operation, retryable=retryable) from err


def _classify(err: Exception, e2b: Any, httpx: Any) -> tuple[str, Retryable] | None:
    """The code and retryability of an SDK or network error; None for anything else."""
    if isinstance(err, e2b.AuthenticationException):
        return "e2b_auth_failed", "no"
    if isinstance(err, e2b.RateLimitException):
        return "e2b_rate_limited", "yes"
    if isinstance(err, e2b.ServiceBusyException):
        return "e2b_busy", "yes"
    if isinstance(err, e2b.SandboxNotFoundException | e2b.SandboxNotRunningException):
        return "sandbox_missing", "no"
    if isinstance(err, e2b.SandboxUnreachableException):
        return "e2b_unreachable", "yes"
    if isinstance(err, e2b.TimeoutException):
        return "e2b_timeout", "yes"
    if isinstance(err, e2b.InvalidArgumentException | e2b.TemplateException):
        return "e2b_invalid_request", "no"
    if isinstance(err, e2b.NotEnoughSpaceException):
        return "e2b_no_space", "no"
    if isinstance(err, e2b.SandboxException):
        status = err.status_code
        if status is None:
            return "e2b_error", "unknown"
        return "e2b_api_error", "yes" if status >= 500 or status == 408 else "no"
    if isinstance(err, httpx.TransportError | OSError):
        return "e2b_network", "yes"
    return None


__all__ = ["ISOLATION", "LABEL_SANDBOX", "WORK_DIR", "E2BSandbox"]
