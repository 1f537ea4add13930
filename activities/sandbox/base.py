"""The one interface every sandbox backend implements."""

from __future__ import annotations

import hashlib
from typing import Protocol

from schemas.sandbox import CreateSandboxInput, ExecInput, SandboxBackend, SandboxRef


def sandbox_id_for(task_id: str) -> str:
    """The sandbox id of a task: derived from the task id, so a retried create finds the same one."""
    return "aw-" + hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:24]


class Sandbox(Protocol):
    """A place to run a task's commands, created once per task and destroyed with it."""

    backend: SandboxBackend

    async def create(self, input: CreateSandboxInput, inputs: dict[str, bytes]) -> SandboxRef:
        """Create the task's sandbox (or find the existing one) holding ``inputs`` in its work dir."""
        ...

    async def exec(self, input: ExecInput) -> tuple[int | None, bool, bytes, bytes]:
        """Run a command: (exit code, timed out, stdout, stderr). Kills it on timeout or cancel."""
        ...

    async def read_file(self, ref: SandboxRef, name: str) -> bytes | None:
        """Read a file from the work dir, or None when it does not exist."""
        ...

    async def destroy(self, ref: SandboxRef) -> bool:
        """Remove the sandbox; whether it existed. Idempotent."""
        ...


__all__ = ["Sandbox", "sandbox_id_for"]
