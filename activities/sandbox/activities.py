"""The ``sandbox.*`` activities: create, exec, destroy, whatever the backend."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping

import structlog
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import SandboxError, activity_boundary
from agent_worker.activities.heartbeat import previous_beat
from agent_worker.activities.sandbox.base import Sandbox
from agent_worker.schemas.digests import canonical_json
from agent_worker.schemas.sandbox import (
    CommandRecord,
    CreateSandboxInput,
    DestroySandboxInput,
    DestroySandboxResult,
    ExecInput,
    PlaceSandboxInput,
    SandboxBackend,
    SandboxPlacement,
    SandboxRef,
    stored_record,
)
from agent_worker.security.redact import redact
from agent_worker.telemetry import metrics
from temporalio import activity

# A command record's inline stdout and stderr together, as JSON: the record is the activity's result
# and travels in the task's state, so it must fit a Temporal payload (2 MB) whatever the spec's
# ``output_limit_bytes``. The full output is always in the record's artifacts.
RECORD_OUTPUT_BYTES = 1_000_000

# Backends whose sandboxes live on the host that made them (a work dir, a container on its daemon):
# only that host can run their commands. An E2B sandbox is reached from anywhere.
HOST_LOCAL = frozenset({SandboxBackend.DOCKER, SandboxBackend.PROCESS})

log = structlog.get_logger(__name__)


class SandboxActivities:
    """Sandbox activities over the backends this worker can run."""

    def __init__(
        self,
        backends: Mapping[SandboxBackend, Sandbox],
        store: ArtifactStore,
        default: SandboxBackend | None = None,
        *,
        unavailable: str | None = None,
        home_queue: str | None = None,
        home_wait_seconds: float | None = None,
    ) -> None:
        self.backends = dict(backends)
        self.store = store
        # This host's own queue (``<queue>.sandbox@<host id>``), recorded in every host-local sandbox
        # it creates, so that the task sends that sandbox's commands and destroy back here.
        self.home_queue, self.home_wait_seconds = home_queue, home_wait_seconds
        # Every heartbeat names this host: a retried first command finds where its sandbox was begun.
        self.heartbeat_note = {"home_queue": home_queue, "home_wait_seconds": home_wait_seconds}
        # What ``auto`` means on this worker: the given default, else the first of docker, e2b, process
        # that it has (a worker offers process only when it names it); None: auto is refused, because
        # of ``unavailable``.
        preference = [SandboxBackend.DOCKER, SandboxBackend.E2B, SandboxBackend.PROCESS]
        self.default = default or next((b for b in preference if b in self.backends), None)
        self.unavailable = unavailable or "this worker has no contained sandbox backend (docker or e2b)"

    def _backend(self, backend: SandboxBackend, operation: str) -> Sandbox:
        if backend is SandboxBackend.AUTO:
            if self.default is None:
                raise SandboxError(
                    f"refusing to run model code: {self.unavailable}",
                    code="sandbox_unavailable",
                    operation=operation,
                    retryable="no",
                )
            backend = self.default
        try:
            return self.backends[backend]
        except KeyError:
            raise SandboxError(
                f"this worker has no {backend.value!r} sandbox backend",
                code="backend_unavailable",
                operation=operation,
                retryable="no",
            ) from None

    @activity.defn(name="sandbox.place")
    @activity_boundary
    async def place(self, input: PlaceSandboxInput) -> SandboxPlacement:
        """This host's home queue, when the task's sandbox would live here (a host-local backend).

        The task asks this before ``sandbox.create`` and then creates the sandbox on that queue: a
        create retried after its host died then waits for that host instead of making a second
        sandbox on another one (the first would be left behind). Creates nothing.
        """
        backend = self._backend(input.spec.backend, "sandbox.place")
        if backend.backend not in HOST_LOCAL or self.home_queue is None:
            return SandboxPlacement()
        return SandboxPlacement(home_queue=self.home_queue, home_wait_seconds=self.home_wait_seconds)

    @activity.defn(name="sandbox.create")
    @activity_boundary
    async def create(self, input: CreateSandboxInput) -> SandboxRef:
        """Create the task's sandbox with its inputs copied in (digests verified), or find it."""
        return await self._create(input, "sandbox.create")

    async def _create(self, input: CreateSandboxInput, operation: str) -> SandboxRef:
        backend = self._backend(input.spec.backend, operation)
        files = {ref.name: await asyncio.to_thread(self.store.get, ref.digest) for ref in input.inputs}
        ref = await backend.create(input, files)
        if ref.backend in HOST_LOCAL and self.home_queue is not None:
            ref = ref.model_copy(
                update={"home_queue": self.home_queue, "home_wait_seconds": self.home_wait_seconds}
            )
        log.info(
            "sandbox ready",
            sandbox_id=ref.sandbox_id,
            backend=ref.backend.value,
            isolation=ref.isolation,
            home_queue=ref.home_queue,
        )
        return ref

    @activity.defn(name="sandbox.exec")
    @activity_boundary
    async def exec(self, input: ExecInput) -> CommandRecord:
        """Run one command; full output becomes artifacts, the record keeps a capped copy.

        With ``input.create`` and no sandbox, the sandbox is created (or found) here first, so a
        task's first command costs one activity, not three (place, create, exec); the record carries
        the new sandbox, whose home is this host. A failure after the create removes it again: the
        task never learnt of it (a retry creates it afresh; a worker killed in between leaves it to
        its host's reaper, by label).
        """
        if input.sandbox is not None:
            return await self._exec(input, input.sandbox)
        if input.create is None:
            raise SandboxError(
                "sandbox.exec needs a sandbox or a create", code="sandbox_missing", operation="sandbox.exec"
            )
        begun = previous_beat() or {}
        home = begun.get("home_queue")
        backend = self._backend(input.create.spec.backend, "sandbox.create").backend
        if backend in HOST_LOCAL and isinstance(home, str) and home != self.home_queue:
            # An earlier attempt (its worker lost) may have made the sandbox on its host: the command
            # goes there, rather than make a second one here and leave that one behind.
            raise SandboxError(
                f"an earlier attempt of this command began the sandbox on {home}; it runs there",
                code="sandbox_begun_elsewhere",
                operation="sandbox.exec",
                retryable="no",
                details={"home_queue": home, "home_wait_seconds": begun.get("home_wait_seconds")},
            )
        sandbox = await self._creating(input.create)
        try:
            record = await self._exec(input, sandbox)
        except BaseException as err:
            with contextlib.suppress(Exception):
                await self.backends[sandbox.backend].destroy(sandbox)
            if isinstance(err, SandboxError):
                err.sandbox_id = err.sandbox_id or sandbox.sandbox_id  # the task never learnt of it
            raise
        return record.model_copy(update={"sandbox": sandbox})

    async def _creating(self, create: CreateSandboxInput) -> SandboxRef:
        """``_create`` for a command, its failures named as the create's (``operation``
        ``sandbox.create``), so the task treats them as before: a failed create is not a failed command."""
        try:
            return await self._create(create, "sandbox.create")
        except SandboxError as err:
            err.operation = err.operation or "sandbox.create"
            raise
        except Exception as err:
            raise SandboxError(
                f"creating the sandbox failed: {err}",
                code="sandbox_create_failed",
                operation="sandbox.create",
            ) from err

    async def _exec(self, input: ExecInput, sandbox: SandboxRef) -> CommandRecord:
        input = input.model_copy(update={"sandbox": sandbox}) if input.sandbox is None else input
        backend = self._backend(sandbox.backend, "sandbox.exec")
        started = time.monotonic()
        outcome = await backend.exec(input)
        exit_code, timed_out, out, err = outcome.exit_code, outcome.timed_out, outcome.stdout, outcome.stderr
        duration_ms = int((time.monotonic() - started) * 1000)
        result = "timed_out" if outcome.timed_out else "oom" if outcome.oom_killed else "exited"
        log.info("command finished", exit_code=outcome.exit_code, outcome=result, duration_ms=duration_ms)
        metrics.activity_histogram(
            "agent_worker_sandbox_exec_milliseconds",
            duration_ms,
            backend=sandbox.backend.value,
            outcome=result,
        )
        limit = input.spec.output_limit_bytes
        outputs, missing = [], []
        for name in input.command.collect:
            data = await backend.read_file(sandbox, name)
            if data is None:
                missing.append(name)
            else:
                # In a thread: a networked store (S3, PostgreSQL) must not block the event loop.
                outputs.append(await asyncio.to_thread(self.store.ref, name, data))
        model_limit = input.spec.model_output_limit_bytes
        tool_output = {
            "exit_code": exit_code,
            "timed_out": timed_out,
            "oom_killed": outcome.oom_killed,
            "stdout": _capped_text(out, model_limit),
            "stderr": _capped_text(err, model_limit),
            "truncated": len(out) > model_limit or len(err) > model_limit,
            "outputs": [o.model_dump(mode="json") for o in outputs],
        }
        stdout = _fit_json(_capped_text(out, limit), RECORD_OUTPUT_BYTES)
        stderr = _fit_json(_capped_text(err, limit), RECORD_OUTPUT_BYTES - len(json.dumps(stdout)))
        truncated = len(stdout) < len(out) or len(stderr) < len(err)

        def persist() -> CommandRecord:
            """The outputs stored, the record made, and its stored copy put: in one trip to a
            thread, since a networked store (S3, PostgreSQL) must not block the event loop."""
            record = CommandRecord(
                call_id=input.call_id,
                sandbox_id=sandbox.sandbox_id,
                # The record is for readers (status, result, evidence): its text is redacted; the
                # artifacts keep the output as it was.
                argv=[redact(arg) for arg in input.command.argv],
                exit_code=exit_code,
                timed_out=timed_out,
                oom_killed=outcome.oom_killed,
                duration_ms=duration_ms,
                stdout=redact(stdout),
                stderr=redact(stderr),
                stdout_artifact=self.store.ref(f"{input.call_id}.stdout", out, "text/plain"),
                stderr_artifact=self.store.ref(f"{input.call_id}.stderr", err, "text/plain") if err else None,
                truncated=truncated,
                outputs=outputs,
                missing_outputs=missing,
                tool_output=self.store.ref(
                    f"{input.call_id}.result.json", canonical_json(tool_output), "application/json"
                ),
            )
            # The task archives its older records by this copy's digest (``artifacts.archive_stored``).
            self.store.put(stored_record(record))
            return record

        return await asyncio.to_thread(persist)

    @activity.defn(name="sandbox.destroy")
    @activity_boundary
    async def destroy(self, input: DestroySandboxInput) -> DestroySandboxResult:
        """Remove the task's sandbox. Idempotent: destroying a gone sandbox is not an error."""
        sandbox = input.sandbox
        backend = self._backend(sandbox.backend, "sandbox.destroy")
        existed = await backend.destroy(input.sandbox)
        return DestroySandboxResult(sandbox_id=input.sandbox.sandbox_id, existed=existed)

    def holds(self, sandbox: SandboxRef) -> bool:
        """Whether this worker can remove ``sandbox``: it lives on this host (its home queue is this
        worker's), or its backend is reached from anywhere and this worker has it (e2b)."""
        if sandbox.backend in HOST_LOCAL:
            return sandbox.home_queue is not None and sandbox.home_queue == self.home_queue
        return sandbox.backend in self.backends

    @staticmethod
    def elsewhere(sandbox: SandboxRef, operation: str) -> SandboxError:
        """The refusal of an ``operation`` on a ``sandbox`` this worker does not hold (not retried)."""
        where = sandbox.home_queue or f"a worker with the {sandbox.backend.value} backend"
        return SandboxError(
            f"sandbox {sandbox.sandbox_id} is not held by this worker (it lives on {where})",
            code="sandbox_elsewhere",
            operation=operation,
            retryable="no",
        )


class SandboxHere:
    """The local activities a task asks first about the sandbox of the worker running it:
    ``sandbox.exec_here`` for a command, ``sandbox.destroy_here`` at its end. That worker usually made
    the sandbox (it serves the sandbox role too), so these cost no round trip through the server.
    Registered on every workflow worker (``sandboxes`` None: it serves no sandbox role), so a task can
    always ask; a sandbox this worker does not hold is refused (``sandbox_elsewhere``), and the task
    then sends the operation to the sandbox's home queue as before."""

    def __init__(self, sandboxes: SandboxActivities | None) -> None:
        self.sandboxes = sandboxes

    def held(self, sandbox: SandboxRef | None, operation: str) -> SandboxActivities:
        """This worker's sandbox activities, if it holds ``sandbox``.

        Raises:
            SandboxError: ``sandbox_elsewhere`` (not retried): another host holds it, or this worker
                has no sandbox role.
        """
        if sandbox is None:
            raise SandboxError(f"{operation} needs a sandbox", code="sandbox_missing", operation=operation)
        if self.sandboxes is None or not self.sandboxes.holds(sandbox):
            raise SandboxActivities.elsewhere(sandbox, operation)
        return self.sandboxes

    @activity.defn(name="sandbox.exec_here")
    @activity_boundary
    async def exec_here(self, input: ExecInput) -> CommandRecord:
        """Run one command in the task's sandbox if this worker holds it (``sandbox.exec``, locally)."""
        return await self.held(input.sandbox, "sandbox.exec").exec(input)

    @activity.defn(name="sandbox.destroy_here")
    @activity_boundary
    async def destroy_here(self, input: DestroySandboxInput) -> DestroySandboxResult:
        """Remove the task's sandbox if this worker holds it."""
        return await self.held(input.sandbox, "sandbox.destroy").destroy(input)


def _fit_json(text: str, budget: int) -> str:
    """``text`` cut until it takes at most ``budget`` bytes as JSON (escapes can make a byte of output
    six bytes of JSON)."""
    size = len(json.dumps(text))
    while size > budget and text:
        text = text[: max(int(len(text) * budget / size) - 16, 0)]
        size = len(json.dumps(text))
    return text


def _capped_text(data: bytes, limit: int) -> str:
    """At most ``limit`` bytes of ``data`` as text (a character cut in half is dropped)."""
    return data[:limit].decode("utf-8", "ignore") if len(data) > limit else data.decode("utf-8", "replace")
