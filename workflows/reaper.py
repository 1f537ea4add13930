"""``SandboxReaper``: the workflow a Temporal Schedule starts to remove orphaned sandboxes."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.sandbox.reaper import ReaperActivities
    from schemas.sandbox import ReapInput, ReapResult
    from workflows import options

REAP_TIMEOUT = timedelta(minutes=10)


@workflow.defn(name="SandboxReaper")
class SandboxReaperWorkflow:
    """Runs ``sandbox.reap`` once."""

    @workflow.run
    async def run(self, input: ReapInput) -> ReapResult:
        return await workflow.execute_activity_method(
            ReaperActivities.reap,
            input,
            start_to_close_timeout=REAP_TIMEOUT,
            heartbeat_timeout=options.HEARTBEAT,
            retry_policy=RetryPolicy(maximum_attempts=3),
            task_queue=options.sandbox_queue(),
        )
