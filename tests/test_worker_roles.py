"""A fleet split by role: worker processes that each run part of the work complete tasks together,
a SIGTERM drains a worker without losing or repeating work, and the health endpoint tells a load
balancer which state a worker is in."""

from __future__ import annotations

import asyncio
import collections
import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

from agent_worker.activities.events import JsonlEventSink
from agent_worker.activities.sandbox.base import sandbox_id_for
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from agent_worker.workflows.options import home_queue
from agent_worker.workflows.placement import NOT_REGISTERED
from temporalio.client import Client, WorkflowHistory

from tests.helpers.histories import events_of, round_trips
from tests.helpers.support import (
    TaskEnv,
    assert_replays,
    example_spec,
    free_port,
    running_worker,
    spawn_worker,
    task_chain,
)


def healthz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


async def wait_health(port: int, status: int, within: float = 60) -> dict:
    deadline = time.monotonic() + within
    while True:
        try:
            code, body = await asyncio.to_thread(healthz, port)
            if code == status:
                return body
        except OSError:
            pass  # not listening yet, or gone
        assert time.monotonic() < deadline, f"health never answered {status}"
        await asyncio.sleep(0.1)


def scheduled_types(history: WorkflowHistory) -> dict[int, str]:
    """The activity type of each ``ActivityTaskScheduled`` event, by event id."""
    return {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }


async def activity_workers(client: Client, workflow_id: str) -> dict[str, set[int]]:
    """For each activity type in the task's histories (every run of its chain), the pids of the
    workers that started it (the SDK's default worker identity is ``pid@host``)."""
    ran_by: dict[str, set[int]] = collections.defaultdict(set)
    for history in await task_chain(client, workflow_id):
        types = scheduled_types(history)  # event ids begin again at 1 in every run
        for e in history.events:
            if e.HasField("activity_task_started_event_attributes"):
                started = e.activity_task_started_event_attributes
                ran_by[types[started.scheduled_event_id]].add(int(started.identity.split("@", 1)[0]))
    return ran_by


async def test_two_workers_with_different_roles_complete_the_example(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """One process runs workflows and business writes, the other agent turns and sandbox commands.
    Each is configured so that building the other's part would fail (no E2B key for a sandbox
    backend of e2b; no DSN for a PostgreSQL business system): they start, so neither builds what it
    does not run. Together they complete the example with one business row."""
    env = config_env
    port = free_port()
    control = spawn_worker(
        env,
        tmp_path / "control.log",
        AGENT_WORKER_ROLES="workflows,business",
        AGENT_WORKER_SANDBOX_BACKEND="e2b",
    )
    hands = spawn_worker(
        env,
        tmp_path / "hands.log",
        AGENT_WORKER_ROLES="agent,sandbox",
        AGENT_WORKER_BUSINESS_BACKEND="postgres",
        AGENT_WORKER_HEALTH_BIND=f"127.0.0.1:{port}",
    )
    try:
        body = await wait_health(port, 200)
        queue = env.task_queue
        assert body["roles"] == ["agent", "sandbox"]
        # The sandbox role also polls its host's home queue (the same host id: the same data dir).
        home = home_queue(queue, env.config.host)
        assert body["task_queues"] == [f"{queue}.agent", f"{queue}.sandbox", home]
        handle = await env.start(example_spec())
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    finally:
        for proc in (control, hands):
            proc.send_signal(signal.SIGTERM)
        for proc in (control, hands):
            await asyncio.to_thread(proc.wait, 40)
    assert (control.returncode, hands.returncode) == (0, 0), (tmp_path / "control.log").read_text()[-2000:]
    assert result.phase is TaskPhase.COMPLETED
    assert result.evidence.commands and result.evidence.writes[0].confirmed is True
    assert env.business().count() == 1
    # Each activity ran in the process holding its role (the history names the worker that started it).
    ran_by = await activity_workers(env.client, handle.id)
    assert ran_by["agent.turn"] == ran_by["sandbox.exec"] == {hands.pid}
    assert ran_by["business.write"] == {control.pid}
    # The write checked its approval itself, and the inputs were stored by a local activity of the
    # workflows worker; the sandbox's destroy, refused there (it holds no sandbox), went to its home.
    assert "authz.check" not in ran_by and "artifacts.ingest" not in ran_by
    assert ran_by["sandbox.destroy"] == {hands.pid}
    chain = await task_chain(env.client, handle.id)
    local = round_trips([e for history in chain for e in events_of(history)]).local_activities
    assert {"artifacts.ingest", "sandbox.destroy_here"} <= set(local)
    # Events go out in local activities of the workflows worker (patch ``local-delivery``), none in
    # an activity of their own.
    assert local.count("events.publish_here") == 2 and "events.publish" not in ran_by


async def test_sigterm_drains_a_busy_worker_without_losing_or_repeating_work(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """SIGTERM arrives while a 4-second command runs: the worker reports draining (503), lets the
    command finish, exits cleanly; the next worker completes the task. The command ran once (its
    own counter says 1) and the task records one command."""
    env = config_env
    port = free_port()
    first = spawn_worker(env, tmp_path / "first.log", AGENT_WORKER_HEALTH_BIND=f"127.0.0.1:{port}")
    second = None
    try:
        await wait_health(port, 200)
        handle = await env.start(
            {"agent": "shell", "prompt": "run: echo run >> runs; touch started; sleep 4; wc -l < runs"}
        )
        started = (
            env.config.sandbox_root
            / sandbox_id_for(handle.id, handle.first_execution_run_id)
            / "work"
            / "started"
        )
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline, "the command never started"
            await asyncio.sleep(0.05)
        first.send_signal(signal.SIGTERM)
        body = await wait_health(port, 503, within=5)
        assert body["status"] == "draining"
        assert await asyncio.to_thread(first.wait, 40) == 0
        second = spawn_worker(env, tmp_path / "second.log")
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.to_thread(proc.wait, 40)
    assert result.phase is TaskPhase.COMPLETED
    [command] = result.evidence.commands
    assert command.exit_code == 0
    assert command.stdout.strip() == "1"  # the command ran once: its own counter says so
    assert result.final_output and "shell said:" in result.final_output


def scheduled_on(history: WorkflowHistory) -> dict[str, list[str]]:
    """For each activity type in the task's history, the task queues it was scheduled on, in order."""
    queues: dict[str, list[str]] = collections.defaultdict(list)
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            scheduled = e.activity_task_scheduled_event_attributes
            queues[scheduled.activity_type.name].append(scheduled.task_queue.name)
    return queues


def not_registered_failures(history: WorkflowHistory) -> list[str]:
    """The activity types whose attempts failed because the worker that took them lacks them."""
    types = scheduled_types(history)
    return [
        types[e.activity_task_failed_event_attributes.scheduled_event_id]
        for e in history.events
        if e.HasField("activity_task_failed_event_attributes")
        and e.activity_task_failed_event_attributes.failure.application_failure_info.type == NOT_REGISTERED
    ]


async def test_a_worker_with_every_role_runs_turns_and_commands_on_the_task_queue(
    config_env: TaskEnv,
) -> None:
    """With every role in one process, agent turns and the first command (which creates the sandbox
    where it runs) are scheduled on the task queue itself (where they start without waiting for
    another queue's dispatch), and the task says so in its state; the sandbox's destroy is a local
    activity of that worker, which holds it. With ``colocate`` off turns and the first command go to
    the role queues, as in a split fleet."""
    env = config_env
    queue = env.task_queue
    prompt = {"agent": "shell", "prompt": "run: echo placed"}
    async with running_worker(env.client, env.config):
        handle = await env.start(prompt)
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        status = await handle.query(AgentTaskWorkflow.status)
    assert result.phase is TaskPhase.COMPLETED
    assert status.colocated == ["agent", "sandbox"]
    history = await handle.fetch_history()
    placed = scheduled_on(history)
    for activity in ("agent.turn", "sandbox.exec"):
        assert set(placed[activity]) == {queue}, (activity, placed[activity])
    assert not {"sandbox.place", "sandbox.create", "sandbox.destroy"} & set(placed), placed
    assert "sandbox.destroy_here" in round_trips(events_of(history)).local_activities
    await assert_replays(env.client, handle.id)

    apart = env.config.model_copy(update={"colocate": False})
    async with running_worker(env.client, apart):
        handle = await env.start(prompt)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    history = await handle.fetch_history()
    placed = scheduled_on(history)
    assert set(placed["agent.turn"]) == {f"{queue}.agent"}
    assert set(placed["sandbox.exec"]) == {f"{queue}.sandbox"}
    assert not {"sandbox.place", "sandbox.create", "sandbox.destroy"} & set(placed), placed
    assert "sandbox.destroy_here" in round_trips(events_of(history)).local_activities


async def test_a_task_moves_its_work_back_to_the_role_queues_when_the_fleet_is_split(
    config_env: TaskEnv,
) -> None:
    """A task starts on a worker with every role and parks for approval. That worker goes; the fleet
    that replaces it is split (workflows and business in one worker, agent and sandbox in another).
    After the approval, the first turn the task schedules on its task queue reaches the workflows
    worker, which fails it before anything runs; the task moves the agent role back to its queue and
    the turn runs there, once. The sandbox's cleanup goes to its host's home queue, which the sandbox
    worker on the same data dir (the same host) polls. One business row, nothing lost."""
    env = config_env
    queue = env.task_queue
    async with running_worker(env.client, env.config):
        handle = await env.start(example_spec())
        await env.awaiting_approval(handle)
    control = env.config.model_copy(update={"roles": ["workflows", "business"]})
    hands = env.config.model_copy(update={"roles": ["agent", "sandbox"]})
    async with running_worker(env.client, control), running_worker(env.client, hands):
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.evidence.missing == []
    assert env.business().count() == 1
    history = await handle.fetch_history()
    assert sorted(not_registered_failures(history)) == ["agent.turn"]
    placed = scheduled_on(history)
    # Before the split, on the task queue; the refused attempt, on it too; from then on, the role queue.
    turns = placed["agent.turn"]
    assert set(turns[:-1]) == {queue} and turns[-1] == f"{queue}.agent", turns
    assert placed["sandbox.destroy"] == [home_queue(queue, env.config.host)]
    events = JsonlEventSink(env.config.events_dir).read(handle.id)
    moved = [e for e in events if e.type.value == "dispatch.moved"]
    assert [e.data["role"] for e in moved] == ["agent"]
    assert "does not serve 'agent'" in moved[0].data["reason"]
    await assert_replays(env.client, handle.id)
