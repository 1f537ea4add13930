"""`agent-worker doctor` against a real dev server: a healthy running task is reported healthy (exit
0); an approval past its SLA, a history past the threshold, a workflow task that fails on every retry
(a test-only workflow bug) and an activity past its retry threshold are each found, named, with what
to do (exit 1)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from agent_worker.cli.doctor import DOCTOR_SCHEDULE_ID
from agent_worker.schemas.health import DoctorReport
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agent_worker.client import WORKFLOW_TYPE
from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import (
    DevServer,
    TaskEnv,
    assert_replays,
    example_spec,
    make_config,
    run_cli,
    running_worker,
)


@workflow.defn(name=WORKFLOW_TYPE)
class BrokenTask:
    """A stand-in for the task workflow with a bug: every workflow task fails."""

    @workflow.run
    async def run(self, raw: Any) -> None:
        raise RuntimeError("test-only workflow bug")


async def doctor(capsys: pytest.CaptureFixture[str], address: str, *args: str) -> tuple[int, list[dict]]:
    code, out, err = await run_cli(capsys, "--address", address, "doctor", "--json", *args)
    assert code in (0, 1), err
    return code, [json.loads(line) for line in out.splitlines() if line.strip()]


async def test_a_healthy_task_passes_and_an_overdue_approval_and_a_long_history_are_found(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task waiting for approval is healthy under the default thresholds; with a 1 s SLA and a tiny
    history threshold, doctor names the request and the history, and exits 1."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    code, out, _ = await run_cli(capsys, "--address", env.address, "doctor", "--task-queue", env.task_queue)
    assert code == 0, out
    assert out.strip().endswith("1 running task(s) checked: healthy")
    await asyncio.sleep(1.2)
    code, findings = await doctor(
        capsys,
        env.address,
        "--task-queue",
        env.task_queue,
        "--approval-sla",
        "1",
        "--history-fraction",
        "0.0002",
    )
    assert code == 1
    checks = {f["check"]: f for f in findings}
    assert set(checks) == {"approval-sla", "history"}
    assert (
        request.request_id in checks["approval-sla"]["detail"]
        and "finance-lead" in checks["approval-sla"]["detail"]
    )
    assert all(f["task_id"] == handle.id and f["advice"] for f in findings)
    await env.cancel(handle)


async def test_a_workflow_task_that_fails_on_every_retry_is_found(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task whose workflow code raises on every workflow task (a deployed bug) is named with the
    number of failures, and exit status 1."""
    queue = f"tq-broken-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[BrokenTask], workflow_runner=UnsandboxedWorkflowRunner()
    ):
        handle = await client.start_workflow(
            WORKFLOW_TYPE, {}, id=f"broken-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        deadline = time.monotonic() + 60
        while (await handle.describe()).raw_description.pending_workflow_task.attempt < 3:
            assert time.monotonic() < deadline, "the workflow task was not retried"
            await asyncio.sleep(0.3)
        code, findings = await doctor(
            capsys, dev_server.address, "--task-queue", queue, "--workflow-task-attempts", "3"
        )
        await handle.terminate("test over")
    assert code == 1
    [failing] = [f for f in findings if f["check"] == "workflow-task"]
    assert failing["task_id"] == handle.id and "failed" in failing["detail"]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


async def test_an_activity_past_its_retry_threshold_is_found(
    client: Client,
    dev_server: DevServer,
    tmp_path: Path,
    stub: OpenAIStub,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The model provider answers 503 again and again: the turn activity retries, and doctor names it,
    its attempt and the provider's words; once the provider answers, the task completes."""
    for _ in range(3):
        stub.reply_error(503, "provider overloaded", headers={"Retry-After": "4"})
    stub.reply_text("recovered")
    config = make_config(
        tmp_path / "data",
        **stub.settings(),
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        handle = await env.start({"agent": "plain", "prompt": "say hello"})
        deadline = time.monotonic() + 60
        while len(stub.requests) < 2:
            assert time.monotonic() < deadline, "the turn was not retried"
            await asyncio.sleep(0.2)
        code, findings = await doctor(
            capsys, env.address, "--task-queue", env.task_queue, "--activity-attempts", "2"
        )
        result = await asyncio.wait_for(handle.result(), 60)
    assert code == 1
    [retrying] = [f for f in findings if f["check"] == "activity-retries"]
    assert "agent.turn is on attempt" in retrying["detail"] and "overloaded" in retrying["detail"]
    assert result.final_output == "recovered"


async def finished_doctor_runs(client: Client, since: datetime) -> list[DoctorReport]:
    """The reports of the FleetDoctor runs started after ``since``, oldest first (None while running)."""
    runs = [
        r
        async for r in client.list_workflows("WorkflowType = 'FleetDoctor'")
        if r.start_time >= since and r.status is not WorkflowExecutionStatus.RUNNING
    ]
    runs.sort(key=lambda r: r.start_time)
    return [
        await client.get_workflow_handle(r.id, run_id=r.run_id, result_type=DoctorReport).result()
        for r in runs
    ]


async def test_the_scheduled_doctor_finds_what_the_command_finds(
    env: TaskEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`doctor --schedule` sets up a Temporal Schedule of the FleetDoctor workflow on the worker's
    queue. Triggered with a 1 s SLA and a tiny history threshold, its run's result names the waiting
    task's overdue request and its history, as the command does; re-scheduled with the defaults, the
    next run reports the same task healthy."""
    monkeypatch.setenv("AGENT_WORKER_TASK_QUEUE", env.task_queue)
    since = datetime.now(UTC)
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    strict = ("--approval-sla", "1", "--history-fraction", "0.0002")
    schedule = env.client.get_schedule_handle(DOCTOR_SCHEDULE_ID)
    try:
        for n, thresholds in enumerate((strict, ())):
            code, out, err = await run_cli(
                capsys,
                "--address",
                env.address,
                "doctor",
                "--task-queue",
                env.task_queue,
                *thresholds,
                "--schedule",
                "1h",
            )
            assert code == 0, err
            assert f"schedule {DOCTOR_SCHEDULE_ID} runs FleetDoctor every 1h on {env.task_queue}" in out
            await asyncio.sleep(1.2)  # past the 1 s SLA
            await schedule.trigger()
            deadline = time.monotonic() + 60
            while len(reports := await finished_doctor_runs(env.client, since)) < n + 1:
                assert time.monotonic() < deadline, "the scheduled doctor did not finish a run"
                await asyncio.sleep(0.3)
            report = reports[n]
            assert report.checked == 1
            if thresholds:
                checks = {f.check: f for f in report.findings}
                assert set(checks) == {"approval-sla", "history"}
                assert request.request_id in checks["approval-sla"].detail
                assert all(f.task_id == handle.id for f in report.findings)
            else:
                assert report.healthy, report.findings
        runs = env.client.list_workflows("WorkflowType = 'FleetDoctor'")
        [latest, *_] = [r async for r in runs if r.start_time >= since]
        await assert_replays(env.client, latest.id, latest.run_id)
    finally:
        await schedule.delete()
    await env.cancel(handle)
