"""The fault matrix's scenarios that have no other home: a sandbox removed from outside mid-command,
state from newer code, a flooding tenant, evidence that cannot be confirmed, and the Temporal server
killed and restarted on its database mid-run. The other scenarios live with their areas (worker
crash, lost write response, cancel, revocation, replay, provider errors); every one records its
outcome for ``python -m bench.faults``, which prints the table."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from agent_worker.schemas.tasks import TaskPhase, TaskResult, TaskStatus
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.helpers.containers import task_containers
from tests.helpers.matrix import Record, leftover_sandboxes, record
from tests.helpers.support import (
    DevServer,
    TaskEnv,
    assert_replays,
    connect,
    example_spec,
    free_port,
    launch_dev_server,
    make_config,
    running_worker,
    spawn_worker,
    until,
)


def events_of(status: TaskStatus, kind: str) -> list[Any]:
    return [e for e in status.last_events if e.type.value == kind]


# ---- 5. the sandbox disappears mid-task ---------------------------------------------------------


async def test_sandbox_removed_mid_command_is_rebuilt_and_the_evidence_says_so(
    docker_env: TaskEnv, record_property: Record
) -> None:
    """Scenario 5. The task's container is removed from outside while its command runs. The exec
    reports the sandbox gone (liveness), the workflow builds a new sandbox from the task's inputs and
    runs the command again; the task completes, but its evidence names the lost sandbox, so the
    result is not plain success; no container is left."""
    daemon = docker.from_env()
    handle = await docker_env.start(
        {"agent": "shell", "prompt": "run: echo begun; sleep 3; echo finished-after-sleep", "tenant": "t5"}
    )

    def sleeping_container() -> Any:
        for container in task_containers(handle.id, running_only=True, daemon=daemon):
            with contextlib.suppress(docker.errors.APIError):
                if any("sleep 3" in " ".join(p) for p in container.top()["Processes"]):
                    return daemon.containers.get(container.id)  # in full: its name
        return None

    victim = await until(sleeping_container, 60, "the command to be running in its container")
    await asyncio.to_thread(victim.remove, force=True)  # from outside, as an operator or a host loss would
    result: TaskResult = await asyncio.wait_for(handle.result(), 90)
    status = await handle.query(AgentTaskWorkflow.status)

    [lost] = events_of(status, "sandbox.lost")
    assert lost.data["sandbox_id"] == victim.name
    assert result.phase is TaskPhase.COMPLETED
    assert result.final_output and "finished-after-sleep" in result.final_output
    [command] = result.evidence.commands  # the command's record is from the rebuilt sandbox
    assert command.exit_code == 0 and command.sandbox_id != victim.id
    assert result.evidence_complete is False
    assert any("was lost" in m for m in result.evidence.missing), result.evidence.missing
    leftover = await asyncio.to_thread(leftover_sandboxes, docker_env.config, [handle.id])
    assert leftover == 0
    await assert_replays(docker_env.client, handle.id)
    record(
        record_property,
        observed="sandbox.lost, rebuilt, command rerun; completed with evidence_complete=False",
        duplicates=len(result.evidence.commands) - 1,
        lost=0,
        leftover=leftover,
    )


# ---- 6. old task meets new code -----------------------------------------------------------------


async def test_state_from_newer_code_is_handed_off_with_the_reason(
    env: TaskEnv, record_property: Record
) -> None:
    """Scenario 6. A task continued as new by a newer worker (its state has schema_version 2 and
    fields this code does not know, some of another type) reaching this older worker ends
    ``handed_off``, explaining why, instead of failing workflow tasks or guessing."""
    newer_state = {"schema_version": 2, "phase": "running", "turn": {"index": 3}, "plan": ["a", "b"]}
    handle = await env.client.start_workflow(
        AgentTaskWorkflow.run,
        {"spec": example_spec(), "state": newer_state},
        id=f"newer-{uuid.uuid4().hex[:8]}",
        task_queue=env.task_queue,
        result_type=TaskResult,
    )
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and "schema 2 is newer than this worker understands (1)" in result.reason
    history = await handle.fetch_history()
    failed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert failed == []
    leftover = leftover_sandboxes(env.config, [handle.id])
    record(
        record_property,
        observed=f"handed_off: {result.reason}",
        duplicates=0,
        lost=0 if result.phase.terminal else 1,
        leftover=leftover,
    )


# ---- 7. two tenants ----------------------------------------------------------------------------

FLOOD_CAP = 3
FLOOD_TASKS = 20
QUIET_TASKS = 5
FLOOD_INTERVAL = 0.25
FLOOD_AFTER = 4  # starts of the flood while (or after) the quiet tasks run, each refused


async def completion_seconds(env: TaskEnv, spec: dict[str, Any]) -> float:
    started = time.monotonic()
    handle = await env.start(spec)
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    return time.monotonic() - started


def quiet(n: int) -> dict[str, Any]:
    return {"agent": "shell", "prompt": f"run: echo quiet-{n}", "tenant": "quiet"}


async def test_a_flooding_tenant_is_capped_and_the_other_keeps_its_pace(
    client: Client, dev_server: DevServer, tmp_path: Path, record_property: Record
) -> None:
    """Scenario 7. With a cap of 3 running tasks for tenant `flood`, 20 simultaneous long flood
    tasks get exactly 3 places; the other 17 end ``rejected`` at once, each with a ``task.refused``
    event naming the cap. The flood goes on (a start every quarter second, each refused) while a
    quiet tenant's tasks run; their median time against the same tasks alone is recorded (the table
    checks the 2x target). When the running flood tasks end, their places are released: a new flood
    task runs."""
    config = make_config(tmp_path / "data", tenant_caps={"flood": FLOOD_CAP})
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        alone = await asyncio.gather(*(completion_seconds(env, quiet(n)) for n in range(QUIET_TASKS)))
        flood_specs = [{"agent": "shell", "prompt": "run: sleep 60", "tenant": "flood"}] * FLOOD_TASKS
        flood = list(await asyncio.gather(*(env.start(spec) for spec in flood_specs)))
        await asyncio.gather(
            *(env.wait_status(h, lambda s: s.phase is not TaskPhase.RECEIVED) for h in flood)
        )
        flooding = asyncio.Event()

        async def keep_flooding() -> None:
            # At least FLOOD_AFTER more starts, however quickly the quiet tasks finish.
            while not flooding.is_set() or len(flood) < FLOOD_TASKS + FLOOD_AFTER:
                flood.append(await env.start(flood_specs[0]))
                await asyncio.sleep(FLOOD_INTERVAL)

        flooder = asyncio.ensure_future(keep_flooding())
        beside = await asyncio.gather(*(completion_seconds(env, quiet(n)) for n in range(QUIET_TASKS)))
        flooding.set()
        await flooder
        # Every start of the flood is settled (running or refused) before it is counted.
        await asyncio.gather(
            *(env.wait_status(h, lambda s: s.phase is not TaskPhase.RECEIVED) for h in flood)
        )

        statuses = await asyncio.gather(*(h.query(AgentTaskWorkflow.status) for h in flood))
        refused = [h for h, s in zip(flood, statuses, strict=True) if s.phase is TaskPhase.REJECTED]
        admitted = [h for h, s in zip(flood, statuses, strict=True) if s.phase is not TaskPhase.REJECTED]
        assert len(admitted) == FLOOD_CAP and len(refused) == len(flood) - FLOOD_CAP > FLOOD_TASKS
        for status in (s for s in statuses if s.phase is TaskPhase.REJECTED):
            [event] = events_of(status, "task.refused")
            assert event.data == {"tenant": "flood", "running": FLOOD_CAP, "cap": FLOOD_CAP}
            assert status.reason == "refused at start: tenant 'flood' already runs 3 tasks, its cap is 3"

        await asyncio.gather(*(env.cancel(h) for h in admitted))
        late = await env.start({"agent": "shell", "prompt": "run: echo admitted-again", "tenant": "flood"})
        late_result = await asyncio.wait_for(late.result(), 60)
        assert late_result.phase is TaskPhase.COMPLETED

    ratio = statistics.median(beside) / statistics.median(alone)
    print(
        f"tenants: quiet median alone {statistics.median(alone):.2f} s, beside the flood "
        f"{statistics.median(beside):.2f} s ({ratio:.2f}x); "
        f"flood admitted {len(admitted)}, refused {len(refused)}"
    )
    leftover = leftover_sandboxes(config, [h.id for h in [*flood, late]])
    assert leftover == 0
    record(
        record_property,
        observed=f"flood capped at {len(admitted)}, {len(refused)} refused and recorded; quiet median "
        f"{ratio:.2f}x of alone",
        duplicates=0,
        lost=0,
        leftover=leftover,
        quiet_ratio=round(ratio, 3),
    )


# ---- 8. evidence collection fails --------------------------------------------------------------


@pytest.fixture
def lookups_down(tmp_path: Path) -> Iterator[None]:
    os.environ["AW_FAULTS"] = "undigested-lookups-down"
    os.environ["AW_FAULT_DIR"] = str(tmp_path / "fault-marks")
    yield
    os.environ.pop("AW_FAULTS", None)
    os.environ.pop("AW_FAULT_DIR", None)


async def test_unconfirmable_evidence_never_reads_as_plain_success(
    client: Client, dev_server: DevServer, tmp_path: Path, lookups_down: None, record_property: Record
) -> None:
    """Scenario 8. The write commits, but its receipt cannot confirm it (the adapter gives no digest
    of what it stored; a receipt with one confirms the write itself since the minimum of round
    trips), and every lookup that would confirm it finds the business system down. The task
    completes marked evidence-incomplete, naming the unconfirmed write."""
    config = make_config(tmp_path / "data", business_writer="tests.helpers.faults:faulty_writer")
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        handle = await env.start(
            {
                "agent": "recorder",
                "prompt": "record: evidence-8",
                "policy": {"rules": [{"tool": "record_value", "decision": "allow"}]},
            }
        )
        result = await asyncio.wait_for(handle.result(), 120)
    rows = env.business().count(operation_key=result.evidence.writes[0].operation_key)
    assert result.phase is TaskPhase.COMPLETED
    assert result.evidence_complete is False
    [write] = result.evidence.writes
    assert write.confirmed is None
    assert any(write.operation_key in m for m in result.evidence.missing), result.evidence.missing
    assert rows == 1
    record(
        record_property,
        observed="completed, evidence_complete=False: " + "; ".join(result.evidence.missing),
        duplicates=rows - 1,
        lost=0,
        leftover=leftover_sandboxes(config, [handle.id]),
    )


# ---- 9. the Temporal server dies mid-run --------------------------------------------------------


async def test_tasks_finish_after_the_server_is_killed_and_restarted_on_its_database(
    tmp_path: Path, record_property: Record
) -> None:
    """Scenario 9. A dev server of its own is SIGKILLed while a worker process runs long tasks and
    others wait for approval, then restarted on the same database and port. The worker reconnects;
    every task finishes, each write lands once."""
    port = free_port()
    server = launch_dev_server(tmp_path / "temporal", port=port)
    worker = None
    try:
        client = await connect(server.address)
        env = TaskEnv(client=client, config=make_config(tmp_path / "data"), address=server.address)
        worker = spawn_worker(env, tmp_path / "worker.log")
        counters = [
            await env.start({"agent": "counter", "prompt": "count to 15", "tenant": "t9"}) for _ in range(3)
        ]
        reports = [await env.start(example_spec()) for _ in range(3)]
        for handle in reports:
            await env.awaiting_approval(handle)
        await env.wait_status(counters[0], lambda s: len(events_of(s, "sandbox.exec")) >= 3)

        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)
        await asyncio.sleep(2)
        server = launch_dev_server(tmp_path / "temporal", port=port)
        client = await connect(server.address)
        env = TaskEnv(client=client, config=env.config, address=server.address)

        reports = [client.get_workflow_handle(h.id, result_type=TaskResult) for h in reports]
        for handle in reports:
            await env.approve(handle)
        handles = [client.get_workflow_handle(h.id, result_type=TaskResult) for h in counters] + reports
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 240)
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(30)
        server.stop()

    phases = [r.phase for r in results]
    assert phases == [TaskPhase.COMPLETED] * len(handles), [(r.task_id, r.phase, r.reason) for r in results]
    assert all("sum 120" in (r.final_output or "") for r in results[:3])
    rows = [env.business().count(operation_key=r.evidence.writes[0].operation_key) for r in results[3:]]
    assert rows == [1, 1, 1]
    leftover = leftover_sandboxes(env.config, [h.id for h in handles])
    assert leftover == 0
    record(
        record_property,
        observed=f"server SIGKILLed and restarted; {len(results)}/{len(handles)} tasks completed",
        duplicates=sum(rows) - len(rows),
        lost=len(handles) - phases.count(TaskPhase.COMPLETED),
        leftover=leftover,
    )
