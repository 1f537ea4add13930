"""The reaper: removes sandboxes whose task is closed or unknown, by label and age.

Destroy runs when a task completes, fails or is cancelled; the reaper is the backstop for what that
could not reach (a worker that died with the process, a task terminated from outside, a daemon that
was down). It judges only sandboxes of its own Temporal namespace and deployment: each backend lists
only those carrying its ``agent-worker.namespace`` and ``agent-worker.deployment`` labels, so another
deployment's live sandboxes on a shared Docker daemon or E2B account are never "unknown" to it (and
sandboxes from before those labels are left alone). It runs as ``agent-worker reap`` and as the
``sandbox.reap`` activity, which a Temporal Schedule starts (``agent-worker reap --schedule 15m``).
Process-tier sandboxes are local to a worker host, so each host's reaper sees its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from agent_worker.activities.errors import activity_boundary
from agent_worker.activities.sandbox.base import Sandbox, SandboxInfo
from agent_worker.schemas.sandbox import ReapedSandbox, ReapInput, ReapResult, SandboxRef
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

log = structlog.get_logger(__name__)


class SandboxReaper:
    """Checks every labelled sandbox of the given backends against its task in Temporal."""

    def __init__(self, backends: Sequence[Sandbox], client: Client) -> None:
        self.backends = list(backends)
        self.client = client

    async def _orphan_reason(self, info: SandboxInfo) -> str | None:
        if info.task_id is None:
            return "no task label"
        try:
            description = await self.client.get_workflow_handle(info.task_id).describe()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                return f"task {info.task_id} is unknown"
            raise
        if description.status is not WorkflowExecutionStatus.RUNNING:
            status = description.status.name.lower() if description.status else "closed"
            return f"task {info.task_id} is {status}"
        return None

    async def reap(self, input: ReapInput) -> ReapResult:
        result = ReapResult(dry_run=input.dry_run)
        for backend in self.backends:
            for info in await backend.list():
                reason = None if info.age_seconds < input.min_age_seconds else await self._orphan_reason(info)
                if reason is None:
                    result.kept += 1
                    continue
                if not input.dry_run:
                    ref = SandboxRef(
                        backend=backend.backend,
                        sandbox_id=info.sandbox_id,
                        provider_id=info.provider_id,
                        isolation="",
                        trusted_only=False,
                    )
                    await backend.destroy(ref)
                log.info("reaped sandbox", sandbox_id=info.sandbox_id, reason=reason, dry_run=input.dry_run)
                result.removed.append(
                    ReapedSandbox(
                        sandbox_id=info.sandbox_id,
                        backend=backend.backend,
                        task_id=info.task_id,
                        reason=reason,
                    )
                )
        return result


class ReaperActivities:
    """``sandbox.reap``, for the scheduled reaper workflow."""

    def __init__(self, reaper: SandboxReaper) -> None:
        self.reaper = reaper

    @activity.defn(name="sandbox.reap")
    @activity_boundary
    async def reap(self, input: ReapInput) -> ReapResult:
        """Remove sandboxes whose task is closed or unknown."""
        return await self.reaper.reap(input)
