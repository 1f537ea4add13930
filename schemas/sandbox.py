"""Sandbox contracts: which sandbox a task uses, and the record of every command run in it."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from agent_worker.schemas.actions import SandboxCommand
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.digests import canonical_json, digest_bytes
from pydantic import BaseModel, ConfigDict, Field


class SandboxBackend(StrEnum):
    """Where commands run. ``auto`` lets the worker choose a contained tier (``docker`` when its daemon
    and image are there, else ``e2b`` when configured; never ``process``); ``process`` runs only where
    the worker names it, and is for trusted development use only."""

    AUTO = "auto"
    DOCKER = "docker"
    E2B = "e2b"
    PROCESS = "process"


class SandboxSpec(BaseModel):
    """What the task asks of its sandbox."""

    model_config = ConfigDict(extra="forbid")

    backend: SandboxBackend = SandboxBackend.AUTO
    network: bool = False
    command_timeout_seconds: float = Field(default=60, gt=0, le=3600)
    memory_mb: int = Field(default=512, ge=16, le=65_536)
    cpus: float = Field(default=1.0, gt=0, le=64)
    pids: int = Field(default=256, ge=8, le=65_536)
    work_dir_mb: int = Field(
        default=512,
        ge=16,
        le=65_536,
        description="Bytes the work dir may hold, in MiB: a write past it fails with 'No space left on "
        "device' (docker: a tmpfs of this size, counted in the container's memory limit on top of "
        "memory_mb; process: the largest file a command may write).",
    )
    output_limit_bytes: int = Field(
        default=1024,
        ge=256,
        le=1_048_576,
        description="Output kept inline in the command record, each of stdout and stderr (the two "
        "together stay under 1 MB of JSON, so the record fits a Temporal payload; the full output is "
        "always in the record's artifacts).",
    )
    model_output_limit_bytes: int = Field(
        default=262_144, ge=1024, le=16_777_216, description="Output the model sees (stored by reference)."
    )


class SandboxRef(BaseModel):
    """A live sandbox, as recorded in the task state."""

    backend: SandboxBackend
    sandbox_id: str
    provider_id: str = Field(default="", description="The backend's own id (container id, E2B sandbox id).")
    isolation: str = Field(description="How it is isolated, e.g. 'bwrap' or 'none'.")
    trusted_only: bool = Field(description="True when the backend must not run untrusted code.")
    home_queue: str | None = Field(
        default=None,
        description="The task queue of the host that holds it (``<queue>.sandbox@<host id>``): its "
        "commands and its destroy go there. None: any sandbox worker reaches it (e2b), or it was made "
        "before sandboxes had homes.",
    )
    home_wait_seconds: float | None = Field(
        default=None,
        gt=0,
        description="How long a command waits for the home queue's host before the sandbox counts as "
        "lost (None: the workflow's default, ``workflows.options.SANDBOX_HOME_WAIT``).",
    )


class CreateSandboxInput(BaseModel):
    """Input of ``sandbox.create``."""

    task_id: str
    tenant: str
    spec: SandboxSpec
    inputs: list[ArtifactRef] = Field(default_factory=list)
    run_id: str = Field(default="", description="The workflow run that asked, for the sandbox's labels.")
    run_chain: str | None = Field(
        default=None,
        description="The task's run chain: a reused task id gets its own sandbox (None: by task id alone).",
    )


class PlaceSandboxInput(BaseModel):
    """Input of ``sandbox.place``: the task asks which host would hold its sandbox."""

    task_id: str
    spec: SandboxSpec


class SandboxPlacement(BaseModel):
    """Output of ``sandbox.place``: the home queue of the host that answered (None: the backend is
    reached from any host, e2b), where the task then creates its sandbox."""

    home_queue: str | None = None
    home_wait_seconds: float | None = Field(default=None, gt=0)


class ExecInput(BaseModel):
    """Input of ``sandbox.exec``."""

    # Written without its defaults (``schemas.payloads``): an activity's own payload, once a step.
    compact_payload: ClassVar[bool] = True

    task_id: str
    call_id: str
    sandbox: SandboxRef | None = Field(
        description="The task's sandbox; None with ``create``: the command's worker creates it first."
    )
    spec: SandboxSpec
    command: SandboxCommand
    create: CreateSandboxInput | None = Field(
        default=None,
        description="When the task has no sandbox yet: the sandbox to create (or find) on the worker "
        "that takes the command, before running it. The record then carries it (``CommandRecord.sandbox``).",
    )


class CommandRecord(BaseModel):
    """Evidence of one sandbox command: what ran, how it ended, and digests of its full output."""

    # Written without its defaults (``schemas.payloads``): ``sandbox.exec``'s result, once a step (a
    # task's result carries it whole).
    compact_payload: ClassVar[bool] = True

    call_id: str
    sandbox_id: str
    argv: list[str]
    exit_code: int | None
    timed_out: bool = False
    oom_killed: bool = False
    duration_ms: int
    stdout: str = Field(description="Standard output, capped at the spec's output limit.")
    stderr: str = ""
    stdout_artifact: ArtifactRef
    stderr_artifact: ArtifactRef | None = Field(
        default=None,
        description="The full standard error. None: the command wrote nothing there (records made "
        "before agent-worker 0.1.0 of 2026-12-04 name the empty artifact instead).",
    )
    truncated: bool = False
    outputs: list[ArtifactRef] = Field(default_factory=list)
    missing_outputs: list[str] = Field(default_factory=list)
    tool_output: ArtifactRef | None = Field(
        default=None, description="The command's result as the model sees it (JSON), by reference."
    )
    sandbox: SandboxRef | None = Field(
        default=None,
        description="The sandbox this command created (``ExecInput.create``); None when it ran in the "
        "task's sandbox. The task takes it into its state and clears it here.",
    )
    takeover_seconds: float | None = Field(
        default=None,
        description="This attempt took over from a worker lost mid-command: seconds from that worker's "
        "last heartbeat to this attempt's start. None: no worker was lost.",
    )


def stored_record(record: CommandRecord) -> bytes:
    """The command record as ``sandbox.exec`` stores it, for the task to archive by digest
    (``artifacts.archive_stored``): canonical JSON without the sandbox it made (the task's state keeps
    that apart) and without a takeover (the archive puts it back, from the task's own copy)."""
    bare = record.model_copy(update={"sandbox": None, "takeover_seconds": None})
    return canonical_json(bare.model_dump(mode="json"))


def record_digest(record: CommandRecord) -> str:
    """The digest ``stored_record(record)`` is stored under: workflow code computes it from its own
    copy of the record, so archiving never carries the record again."""
    return digest_bytes(stored_record(record))


class DestroySandboxInput(BaseModel):
    """Input of ``sandbox.destroy``."""

    task_id: str
    sandbox: SandboxRef


class DestroySandboxResult(BaseModel):
    """Output of ``sandbox.destroy``."""

    sandbox_id: str
    existed: bool


class ReapInput(BaseModel):
    """Input of ``sandbox.reap``: which sandboxes count as orphans."""

    min_age_seconds: float = Field(default=600, ge=0, description="Younger sandboxes are never reaped.")
    dry_run: bool = False


class ReapedSandbox(BaseModel):
    """A sandbox the reaper removed (or would have, in a dry run), and why."""

    sandbox_id: str
    backend: SandboxBackend
    task_id: str | None
    reason: str


class ReapResult(BaseModel):
    """Output of ``sandbox.reap``."""

    removed: list[ReapedSandbox] = Field(default_factory=list)
    kept: int = 0
    dry_run: bool = False
