"""Scheduled agent runs against a real dev server and worker: a 2-second schedule of the monthly
report starts runs that are normal tasks (each waits for its approval, then completes with evidence),
``skip`` starts no second run while one waits, ``allow_all`` does, pause stops runs and unpause
resumes them, list and describe show the schedule and delete removes it; doctor names a schedule
whose runs keep failing. Every wait polls the schedule's own state (its actions, counts and runs),
or the server's schedule clock (a bare schedule's count of actions): nothing is timed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_worker.schemas.schedules import ScheduleView, TaskSchedule
from agent_worker.schemas.tasks import TaskPhase
from pydantic import ValidationError
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)

from agent_worker.client import AgentWorkerClient, TaskEnded, workflow_input
from agent_worker.schedules import ScheduleNotFound, TaskSchedules
from tests.helpers.support import TaskEnv, example_spec, run_cli

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "schedules.md"
SCHEDULE_ID = "acme/monthly-report"  # the example's tenant, and the name the docs give it
# The docs' session (docs/schedules.md), as the tests run it (``--address`` before, and for
# ``create`` the test's ``--task-queue`` after).
CREATE = "schedule create monthly-report --example monthly-report --every 2s --overlap skip"
LIST = "schedule list --tenant acme"
DESCRIBE = f"schedule describe {SCHEDULE_ID}"
PAUSE = f"schedule pause {SCHEDULE_ID} --note 'quarter close'"
UNPAUSE = f"schedule unpause {SCHEDULE_ID}"
DELETE = f"schedule delete {SCHEDULE_ID}"
FAILING_CREATE = "schedule create failing failing.json --every 2s"
DOCTOR_LENIENT = "doctor --schedule-failures 50"
DOCTOR = "doctor"
TESTED_COMMANDS = [CREATE, LIST, DESCRIBE, PAUSE, UNPAUSE, DELETE, FAILING_CREATE, DOCTOR_LENIENT, DOCTOR]
WAIT = 120.0  # seconds any one condition may take on a loaded machine before the test fails


async def cli(capsys: pytest.CaptureFixture[str], env: TaskEnv, command: str, *extra: str) -> tuple[int, str]:
    """Run ``agent-worker --address <env> <command> <extra>``: the exit code, and stdout (with stderr
    after it when the command failed: the error, and any worker log lines of the test's worker)."""
    code, out, err = await run_cli(capsys, "--address", env.address, *shlex.split(command), *extra)
    return code, out if code == 0 else out + err


async def until_view(
    schedules: TaskSchedules,
    schedule_id: str,
    holds: Callable[[ScheduleView], bool],
    what: str,
    *,
    outcomes: bool = False,
) -> ScheduleView:
    """Describe the schedule until ``holds`` does; the view that held."""
    deadline = time.monotonic() + WAIT
    while True:
        view = await schedules.describe(schedule_id, outcomes=outcomes)
        if holds(view):
            return view
        assert time.monotonic() < deadline, f"{schedule_id}: {what} never happened; last: {view}"
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def schedule_clock(client: Client) -> AsyncIterator[ScheduleHandle]:
    """A bare 2-second schedule that starts a workflow no worker runs: its count of actions is the
    server's schedule clock, the witness that due times passed."""
    clock_id = f"clock-{uuid.uuid4().hex[:8]}"
    handle = await client.create_schedule(
        clock_id,
        Schedule(
            action=ScheduleActionStartWorkflow("Clock", id=clock_id, task_queue=f"nobody-{clock_id}"),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=2))]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL),
        ),
    )
    try:
        yield handle
    finally:
        description = await handle.describe()
        await handle.delete()
        for action in description.info.recent_actions:
            with contextlib.suppress(Exception):
                await client.get_workflow_handle(action.action.workflow_id).terminate("clock stopped")


async def ticks(clock: ScheduleHandle, count: int) -> None:
    """Wait until the clock has started ``count`` more actions (``count`` due times passed)."""
    start = (await clock.describe()).info.num_actions
    deadline = time.monotonic() + WAIT
    while (await clock.describe()).info.num_actions < start + count:
        assert time.monotonic() < deadline, "the schedule clock did not tick"
        await asyncio.sleep(0.2)


async def approve_and_finish(tasks: AgentWorkerClient, task_id: str) -> Any:
    """Approve the run's one request as finance-lead and return its result."""
    request = await tasks.next_request(task_id, within=WAIT)
    await tasks.decide(task_id, request.request_id, "approve", "finance-lead")
    return await asyncio.wait_for(tasks.result(task_id), WAIT)


async def stop_runs(tasks: AgentWorkerClient, task_ids: list[str]) -> None:
    """Cancel the runs still going and wait until each has closed (while the worker runs)."""
    for task_id in task_ids:
        with contextlib.suppress(Exception):
            await tasks.cancel(task_id)
    for task_id in task_ids:
        with contextlib.suppress(TaskEnded, TimeoutError):
            await asyncio.wait_for(tasks.result(task_id), WAIT)


def run_id(schedule_id: str, view: ScheduleView, index: int) -> str:
    run = view.recent[index]
    assert run.task_id == f"{schedule_id}-{run.scheduled_at:%Y-%m-%dT%H:%M:%SZ}"
    return run.task_id


async def test_the_docs_session_schedules_normal_tasks_skips_overlaps_pauses_and_deletes(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """The docs' commands on a 2-second schedule of the monthly report: its first run waits for
    finance-lead while later due times are skipped (skip: one run, none beside it); approved, each
    run completes as a normal task with evidence, under the id <schedule id>-<scheduled time>; list
    and describe show the schedule, its cadence, policy and runs; paused, it starts nothing while the
    server's schedule clock passes three due times; unpaused, runs start again; deleted, it is gone."""
    tasks = AgentWorkerClient(env.client, env.task_queue)
    schedules = tasks.schedules
    started: list[str] = []
    try:
        code, out = await cli(capsys, env, CREATE, "--task-queue", env.task_queue)
        assert code == 0, out
        assert f"schedule {SCHEDULE_ID} starts a task (agent monthly-report) every 2s" in out

        # skip: the first run waits for its approval; two later due times pass, and no run starts.
        view = await until_view(
            schedules, SCHEDULE_ID, lambda v: v.skipped_overlap >= 2 or v.runs > 1, "two skipped runs"
        )
        first = run_id(SCHEDULE_ID, view, 0)
        assert (view.runs, view.running, len(view.recent)) == (1, [first], 1)

        deadline = time.monotonic() + WAIT
        while SCHEDULE_ID not in (listed := (await cli(capsys, env, LIST))[1]):  # visibility catches up
            assert time.monotonic() < deadline, listed
            await asyncio.sleep(0.3)
        [line] = [row for row in listed.splitlines() if row.startswith(SCHEDULE_ID)]
        assert "active" in line and "every 2s" in line and "agent=monthly-report" in line
        code, described = await cli(capsys, env, DESCRIBE)
        assert code == 0, described
        assert "overlap skip" in described and "every 2s" in described and "tenant acme" in described
        assert f"running:  {first}" in described and "skipped (overlap)" in described

        # Each run is a normal task: approved, it completes with its evidence.
        for index in range(2):
            view = await until_view(
                schedules, SCHEDULE_ID, lambda v, done=index: v.runs > done, f"run {index + 1}"
            )
            task_id = run_id(SCHEDULE_ID, view, index)
            started.append(task_id)
            result = await approve_and_finish(tasks, task_id)
            assert (result.task_id, result.phase) == (task_id, TaskPhase.COMPLETED)
            evidence = result.evidence
            assert evidence.missing == [] and result.evidence_complete
            assert [a.principal for a in evidence.approvals] == ["finance-lead"]
            assert len(evidence.commands) == 1 and evidence.commands[0].exit_code == 0
            assert [w.confirmed for w in evidence.writes] == [True]
        described = (await schedules.describe(SCHEDULE_ID)).recent
        assert [(r.status, r.phase) for r in described[:2]] == [("completed", "completed")] * 2

        # Paused, with no run left running (so that skip cannot be what holds runs back): while
        # three due times pass, no run starts.
        code, out = await cli(capsys, env, PAUSE)
        assert code == 0 and f"schedule {SCHEDULE_ID} paused" in out, out
        paused = await schedules.describe(SCHEDULE_ID)
        assert paused.paused and paused.note == "quarter close"
        started += paused.running
        await stop_runs(tasks, paused.running)
        idle = await until_view(schedules, SCHEDULE_ID, lambda v: not v.running, "no run running")
        async with schedule_clock(env.client) as clock:
            await ticks(clock, 3)
        still = await schedules.describe(SCHEDULE_ID)
        assert (still.runs, still.running, [r.task_id for r in still.recent]) == (
            idle.runs,
            [],
            [r.task_id for r in idle.recent],
        )

        # Unpaused: runs start again.
        code, out = await cli(capsys, env, UNPAUSE)
        assert code == 0, out
        resumed = await until_view(
            schedules, SCHEDULE_ID, lambda v: v.runs > still.runs, "a run after unpause"
        )
        started += resumed.running

        code, out = await cli(capsys, env, DELETE)
        assert code == 0 and f"schedule {SCHEDULE_ID} deleted" in out, out
        with pytest.raises(ScheduleNotFound):
            await schedules.describe(SCHEDULE_ID)
        code, out = await cli(capsys, env, DESCRIBE)
        assert code == 1 and f"no schedule '{SCHEDULE_ID}'" in out
        deadline = time.monotonic() + WAIT
        while SCHEDULE_ID in (listed := (await cli(capsys, env, LIST))[1]):
            assert time.monotonic() < deadline, listed
            await asyncio.sleep(0.3)
    finally:
        with contextlib.suppress(ScheduleNotFound):
            started += (await schedules.describe(SCHEDULE_ID, outcomes=False)).running
            await schedules.delete(SCHEDULE_ID)
        await stop_runs(tasks, started)


async def test_allow_all_starts_a_second_run_beside_one_waiting_for_approval(env: TaskEnv) -> None:
    """With ``allow_all`` (through the client, as an app creates one), a run whose time comes while
    the last one waits for its approval starts beside it: two runs wait at once, none skipped. The
    schedule starts each run with the very input ``start`` sends."""
    tasks = AgentWorkerClient(env.client, env.task_queue)
    tenant = f"t{uuid.uuid4().hex[:8]}"
    spec = {**example_spec(), "tenant": tenant}
    schedule_id = await tasks.schedules.create(
        {"name": "report", "spec": spec, "every": timedelta(seconds=2), "overlap": "allow_all"}
    )
    assert schedule_id == f"{tenant}/report"
    try:
        action = (await env.client.get_schedule_handle(schedule_id).describe()).schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        assert await env.client.data_converter.decode(list(action.args)) == [workflow_input(spec)]
        view = await until_view(
            tasks.schedules, schedule_id, lambda v: len(v.running) >= 2, "two runs at once", outcomes=True
        )
        assert view.skipped_overlap == 0
        for task_id in view.running[:2]:
            assert task_id.startswith(f"{schedule_id}-")
            request = await tasks.next_request(task_id, within=WAIT)
            assert request.approvers == ["finance-lead"]
    finally:
        await tasks.schedules.pause(schedule_id)
        running = (await tasks.schedules.describe(schedule_id)).running
        await tasks.schedules.delete(schedule_id)
        await stop_runs(tasks, running)


async def test_doctor_names_a_schedule_whose_runs_keep_failing(
    env: TaskEnv, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schedule whose spec names no agent this worker runs fails every run, fast. Created paused,
    a triggered run fails; unpaused, runs go on failing. Doctor reports it healthy while its failures
    are fewer than --schedule-failures, and with the default (3) names the schedule, its newest
    failed run and that run's failure, with what to do (exit 1)."""
    monkeypatch.chdir(tmp_path)
    tenant = f"t{uuid.uuid4().hex[:8]}"
    Path("failing.json").write_text(json.dumps({"agent": "no-such-agent", "prompt": "x", "tenant": tenant}))
    schedule_id = f"{tenant}/failing"
    tasks = AgentWorkerClient(env.client, env.task_queue)
    try:
        code, out = await cli(capsys, env, FAILING_CREATE, "--paused", "--task-queue", env.task_queue)
        assert code == 0 and "(paused)" in out, out
        code, out = await cli(capsys, env, f"schedule trigger {schedule_id}")
        assert code == 0, out
        await until_view(
            tasks.schedules,
            schedule_id,
            lambda v: [r.status for r in v.recent] == ["failed"],
            "the triggered run failed",
            outcomes=True,
        )
        code, out = await cli(capsys, env, f"schedule unpause {schedule_id}")
        assert code == 0, out
        view = await until_view(
            tasks.schedules,
            schedule_id,
            lambda v: [r.status for r in v.recent[-3:]] == ["failed"] * 3,
            "three failed runs",
            outcomes=True,
        )
        queue = ("--task-queue", env.task_queue)
        code, out = await cli(capsys, env, DOCTOR_LENIENT, *queue)
        assert code == 0, out
        assert out.strip().endswith("running task(s) and 1 task schedule(s) checked: healthy"), out
        code, out = await cli(capsys, env, DOCTOR, *queue, "--json")
        assert code == 1, out
        [finding] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert (finding["check"], finding["schedule_id"]) == ("schedule-runs", schedule_id)
        assert finding["task_id"].startswith(f"{schedule_id}-")
        assert finding["task_id"] >= view.recent[-1].task_id  # the newest failed run at the time
        assert "last 3 finished runs failed" in finding["detail"]
        assert "unknown agent 'no-such-agent'" in finding["detail"]
        assert f"agent-worker schedule pause {schedule_id}" in finding["advice"]
        code, out = await cli(capsys, env, DOCTOR, *queue)
        assert code == 1 and f"schedule {schedule_id}  schedule-runs:" in out, out
    finally:
        with contextlib.suppress(ScheduleNotFound):
            await tasks.schedules.delete(schedule_id)


async def test_bad_schedules_are_refused_naming_why(env: TaskEnv, capsys: pytest.CaptureFixture[str]) -> None:
    """A cron expression the server cannot read and a catch-up window under Temporal's 10 s are
    refused (exit 2) with the reason; an unknown id, and a schedule that starts no agent task (a bare
    one, like the doctor's), are not found (exit 1) and left alone."""
    code, out = await cli(capsys, env, "schedule create bad --example monthly-report --cron 'not a cron'")
    assert code == 2 and "CronString" in out, out
    code, out = await cli(
        capsys, env, "schedule create bad --example monthly-report --every 1h --catchup-window 5s"
    )
    assert code == 2 and "catchup_window must be at least 10 s" in out, out
    code, out = await cli(capsys, env, "schedule pause acme/nothing-here")
    assert code == 1 and "no schedule 'acme/nothing-here'" in out, out
    async with schedule_clock(env.client) as clock:
        code, out = await cli(capsys, env, f"schedule delete {clock.id}")
        assert code == 1 and "starts no agent task" in out, out
        await clock.describe()  # still there


def test_a_schedule_has_one_cadence_and_an_id_in_its_tenant() -> None:
    """The id is the name in the spec's tenant (a name already so scoped is kept); a schedule needs
    exactly one of interval and cron, an interval of at least 1 s, a time zone only with cron, and a
    name that cannot reach into another tenant."""
    spec = {"agent": "a", "prompt": "p", "tenant": "acme"}
    assert TaskSchedule(name="nightly", spec=spec, cron="0 2 * * *").schedule_id == "acme/nightly"
    assert (
        TaskSchedule(name="acme/nightly", spec=spec, every=timedelta(hours=1)).schedule_id == "acme/nightly"
    )
    refused = {
        "exactly one of": {"name": "n", "spec": spec},
        "exactly one of ": {"name": "n", "spec": spec, "every": 60, "cron": "* * * * *"},
        "at least 1 s": {"name": "n", "spec": spec, "every": 0.5},
        "timezone applies": {"name": "n", "spec": spec, "every": 60, "timezone": "Europe/Paris"},
        "name 'beta/n'": {"name": "beta/n", "spec": spec, "every": 60},
        "name ' n'": {"name": " n", "spec": spec, "every": 60},
    }
    for words, fields in refused.items():
        with pytest.raises(ValidationError, match=re.escape(words.strip())):
            TaskSchedule.model_validate(fields)


def test_the_docs_commands_are_the_ones_the_tests_run() -> None:
    """Every ``agent-worker schedule`` and ``agent-worker doctor`` line of docs/schedules.md is a
    command these tests run, as written."""
    lines = re.findall(
        r"^\$ agent-worker ((?:schedule|doctor)\b.*?)\s*(?:#.*)?$", DOC.read_text(), re.MULTILINE
    )
    assert lines, "docs/schedules.md shows no session"
    assert [line for line in lines if line not in TESTED_COMMANDS] == []


def test_the_cli_takes_each_overlap_policy_in_either_spelling_and_lists_by_default() -> None:
    """`--overlap` takes every policy as the docs write it (`buffer-one`) or as the schema does
    (`buffer_one`), refuses others (exit 2), and `agent-worker schedule` alone lists the schedules."""
    from agent_worker.cli.main import build_parser
    from agent_worker.cli.schedules import cmd_list
    from agent_worker.schemas.schedules import OverlapPolicy

    parser = build_parser()
    for policy in OverlapPolicy:
        for spelling in (policy.value, policy.value.replace("_", "-")):
            argv = ["schedule", "create", "n", "f.json", "--every", "1h", "--overlap", spelling]
            assert OverlapPolicy(parser.parse_args(argv).overlap) is policy
    with pytest.raises(SystemExit) as refused:
        parser.parse_args(["schedule", "create", "n", "f.json", "--every", "1h", "--overlap", "queue"])
    assert refused.value.code == 2
    assert parser.parse_args(["schedule"]).handler is cmd_list
