"""The one interface every sandbox backend implements."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

from agent_worker.schemas.sandbox import CreateSandboxInput, ExecInput, SandboxBackend, SandboxRef

# Labels (Docker) / metadata (E2B) / labels.json (process) every sandbox carries, for reaping.
LABEL_TASK = "agent-worker.task_id"
LABEL_TENANT = "agent-worker.tenant"
LABEL_RUN = "agent-worker.run_id"
LABEL_BACKEND = "agent-worker.backend"
LABEL_CREATED = "agent-worker.created_at"
# Who owns a sandbox: the reaper judges only its own namespace's and deployment's.
LABEL_NAMESPACE = "agent-worker.namespace"
LABEL_DEPLOYMENT = "agent-worker.deployment"


def sandbox_id_for(task_id: str, run_chain: str | None = None) -> str:
    """The sandbox id of a task: derived from the task id and its run chain, so a retried create
    finds the same one and a reused task id (a new chain) never finds an earlier run's sandbox.
    Without a chain (tasks started before run chains) the task id alone, as before."""
    scope = task_id if run_chain is None else f"{task_id}\x00{run_chain}"
    return "aw-" + hashlib.sha256(scope.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class ExecOutcome:
    """How a command ended. ``exit_code`` is None when it was killed from outside."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    oom_killed: bool = False


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox a backend knows about, as the reaper sees it."""

    sandbox_id: str
    task_id: str | None
    age_seconds: float
    backend: SandboxBackend
    provider_id: str = ""


class Sandbox(Protocol):
    """A place to run a task's commands, created once per task and destroyed with it.

    Every operation is idempotent: a retried create finds the sandbox it made (by its id or labels),
    a repeated destroy is harmless.
    """

    backend: SandboxBackend

    async def create(self, input: CreateSandboxInput, inputs: dict[str, bytes]) -> SandboxRef:
        """Create the task's sandbox (or find the existing one) holding ``inputs`` in its work dir."""
        ...

    async def exec(self, input: ExecInput) -> ExecOutcome:
        """Run a command, killed inside the sandbox at its timeout and from outside on cancel."""
        ...

    async def read_file(self, ref: SandboxRef, name: str) -> bytes | None:
        """Read a file from the work dir, or None when it does not exist."""
        ...

    async def destroy(self, ref: SandboxRef) -> bool:
        """Remove the sandbox; whether it existed."""
        ...

    async def list(self) -> list[SandboxInfo]:
        """Every sandbox of this backend that carries this package's labels (for the reaper)."""
        ...


__all__ = [
    "LABEL_BACKEND",
    "LABEL_CREATED",
    "LABEL_DEPLOYMENT",
    "LABEL_NAMESPACE",
    "LABEL_RUN",
    "LABEL_TASK",
    "LABEL_TENANT",
    "ExecOutcome",
    "Sandbox",
    "SandboxInfo",
    "sandbox_id_for",
]
