"""``ShadowRun``: a candidate agent replayed on many recorded tasks, as one job on the fleet.

Started by ``agent-worker shadow`` with the recorded tasks already stored (``schemas.shadow``). It
runs one ``ShadowTask`` child workflow per recorded task, at most ``max_concurrency`` at a time, so a
thousand tasks are an ordinary job spread over the fleet's workers; a worker lost mid-run costs only
the activity it held (the children and this workflow resume on another). When every child has
ended, ``shadow.report`` reads their stored results and writes the JSON and Markdown reports.

Each child's id is ``<shadow run id>/<task id>``: a task is replayed, and scored, once per run.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.shadow import (
        ShadowReportInput,
        ShadowReportResult,
        ShadowRunInput,
        ShadowRunResult,
        ShadowTaskInput,
        ShadowTaskRef,
    )
    from pydantic import ValidationError

from agent_worker.workflows import options
from agent_worker.workflows.shadow_task import ShadowTaskWorkflow

INVALID_INPUT = "invalid_shadow_input"


@workflow.defn(name="ShadowRun")
class ShadowRunWorkflow:
    """Replays each recorded task with the candidate (children, bounded), then writes the report."""

    def __init__(self) -> None:
        self.done = 0
        self.total = 0

    @workflow.query(name="progress")
    def progress(self) -> dict[str, int]:
        """How many recorded tasks have been replayed, of how many."""
        return {"done": self.done, "total": self.total}

    @workflow.run
    async def run(self, raw: dict) -> ShadowRunResult:  # type: ignore[type-arg]
        # Validated here, not by the converter: a bad input fails the run, never its workflow task.
        try:
            input = ShadowRunInput.model_validate(raw)
        except ValidationError as err:
            raise ApplicationError(
                f"invalid shadow run input: {err}", type=INVALID_INPUT, non_retryable=True
            ) from None
        self.total = len(input.tasks)
        slots = asyncio.Semaphore(input.max_concurrency)
        results: list[ShadowTaskRef | None] = [None] * len(input.tasks)
        failed: dict[str, str] = {}

        async def replay(index: int, task: ShadowTaskRef) -> None:
            async with slots:
                try:
                    results[index] = await workflow.execute_child_workflow(
                        ShadowTaskWorkflow.run,
                        ShadowTaskInput(
                            candidate=input.candidate, model=input.model, scorer=input.scorer, task=task
                        ),
                        id=f"{workflow.info().workflow_id}/{task.task_id}",
                        static_summary=f"shadow replay of {task.task_id}",
                    )
                except ChildWorkflowError as err:
                    failed[task.task_id] = str(err.cause or err)
                self.done += 1

        await asyncio.gather(*(replay(i, task) for i, task in enumerate(input.tasks)))
        report = await workflow.execute_activity(
            "shadow.report",
            ShadowReportInput(
                shadow_id=workflow.info().workflow_id,
                candidate=input.candidate,
                model=input.model,
                scorer=input.scorer,
                results=[r for r in results if r is not None],
                failed=failed,
            ),
            result_type=ShadowReportResult,
            **options.config(options.INGEST, summary="write the shadow report"),
        )
        return ShadowRunResult(
            shadow_id=workflow.info().workflow_id,
            candidate=input.candidate,
            summary=report.summary,
            json_ref=report.json_ref,
            markdown_ref=report.markdown_ref,
        )


__all__ = ["ShadowRunWorkflow"]
