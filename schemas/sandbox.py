"""Sandbox contracts: which sandbox a task uses, and the record of every command run in it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from schemas.actions import SandboxCommand
from schemas.artifacts import ArtifactRef


class SandboxBackend(StrEnum):
    """Where commands run. ``process`` is for trusted development use only."""

    PROCESS = "process"


class SandboxSpec(BaseModel):
    """What the task asks of its sandbox."""

    model_config = ConfigDict(extra="forbid")

    backend: SandboxBackend = SandboxBackend.PROCESS
    network: bool = False
    command_timeout_seconds: float = Field(default=60, gt=0, le=3600)
    output_limit_bytes: int = Field(
        default=1024, ge=256, le=1_048_576, description="Output kept inline in the command record."
    )
    model_output_limit_bytes: int = Field(
        default=262_144, ge=1024, le=16_777_216, description="Output the model sees (stored by reference)."
    )


class SandboxRef(BaseModel):
    """A live sandbox, as recorded in the task state."""

    backend: SandboxBackend
    sandbox_id: str
    isolation: str = Field(description="How it is isolated, e.g. 'bwrap' or 'none'.")
    trusted_only: bool = Field(description="True when the backend must not run untrusted code.")


class CreateSandboxInput(BaseModel):
    """Input of ``sandbox.create``."""

    task_id: str
    tenant: str
    spec: SandboxSpec
    inputs: list[ArtifactRef] = Field(default_factory=list)


class ExecInput(BaseModel):
    """Input of ``sandbox.exec``."""

    task_id: str
    call_id: str
    sandbox: SandboxRef
    spec: SandboxSpec
    command: SandboxCommand


class CommandRecord(BaseModel):
    """Evidence of one sandbox command: what ran, how it ended, and digests of its full output."""

    call_id: str
    sandbox_id: str
    argv: list[str]
    exit_code: int | None
    timed_out: bool = False
    duration_ms: int
    stdout: str = Field(description="Standard output, capped at the spec's output limit.")
    stderr: str = ""
    stdout_artifact: ArtifactRef
    stderr_artifact: ArtifactRef
    truncated: bool = False
    outputs: list[ArtifactRef] = Field(default_factory=list)
    missing_outputs: list[str] = Field(default_factory=list)
    tool_output: ArtifactRef | None = Field(
        default=None, description="The command's result as the model sees it (JSON), by reference."
    )


class DestroySandboxInput(BaseModel):
    """Input of ``sandbox.destroy``."""

    task_id: str
    sandbox: SandboxRef


class DestroySandboxResult(BaseModel):
    """Output of ``sandbox.destroy``."""

    sandbox_id: str
    existed: bool
