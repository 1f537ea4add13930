"""``SandboxReaper``: the workflow a Temporal Schedule starts to remove orphaned sandboxes."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.sandbox.reaper import ReaperActivities
    from agent_worker.schemas.sandbox import ReapInput, ReapResult

from agent_worker.workflows import options


@workflow.defn(name="SandboxReaper")
class SandboxReaperWorkflow:
    """Runs ``sandbox.reap`` once."""

    @workflow.run
    async def run(self, input: ReapInput) -> ReapResult:
        return await workflow.execute_activity_method(
            ReaperActivities.reap,
            input,
            **options.config(
                options.REAP,
                summary=f"reap sandboxes older than {input.min_age_seconds:g} s"
                + (" (dry run)" if input.dry_run else ""),
                task_queue=options.sandbox_queue(),
            ),
        )
