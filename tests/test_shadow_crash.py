"""A shadow run survives the loss of its worker: SIGKILL mid-run, a new worker process finishes it,
and every recorded task is replayed and scored exactly once."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from agent_worker.cli.shadow_record import read_recorded_task
from agent_worker.schemas.shadow import SHADOW_RUN_WORKFLOW, ShadowRunInput, ShadowRunResult, ShadowTaskRef
from agent_worker.schemas.tasks import TaskPhase
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from tests.helpers.shadow_agents import DIVERGING, GATE_ENV, GATED_FROM, SCORE_LOG_ENV
from tests.helpers.support import TaskEnv, running_worker, sigkill, until, worker_process

CANDIDATE = "tests.helpers.shadow_agents:gated_candidate"
SCORER = "tests.helpers.shadow_agents:score"
ALLOW_WRITES = [{"tool": "record_value", "decision": "allow"}]


async def recorded_refs(env: TaskEnv, items: list[str]) -> dict[str, ShadowTaskRef]:
    """Run one real recorder task per item (its write allowed), read each history back as a recorded
    task and store it, as ``agent-worker shadow`` does: item -> its reference."""
    async with running_worker(env.client, env.config):
        handles = {
            item: await env.start(
                {"agent": "recorder", "prompt": f"record: {item}", "policy": {"rules": ALLOW_WRITES}},
                task_id=f"rec-{item}-{env.task_queue}",
            )
            for item in items
        }
        for handle in handles.values():
            result = await asyncio.wait_for(handle.result(), 120)
            assert result.phase is TaskPhase.COMPLETED, result.reason
    store = env.store()
    refs = {}
    for item, handle in handles.items():
        task = await read_recorded_task(await handle.fetch_history(), env.client.data_converter)
        refs[item] = ShadowTaskRef(task_id=handle.id, ref=store.put_json(task.model_dump(mode="json")))
    return refs


async def status(env: TaskEnv, workflow_id: str) -> WorkflowExecutionStatus | None:
    try:
        return (await env.client.get_workflow_handle(workflow_id).describe()).status
    except RPCError:  # not started yet
        return None


def turn_attempts(history: dict[str, Any]) -> list[int]:
    """The attempt of each started ``shadow.turn`` in a ShadowTask's history."""
    turns = {
        e["eventId"]
        for e in history["events"]
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
        and e["activityTaskScheduledEventAttributes"]["activityType"]["name"] == "shadow.turn"
    }
    return [
        int(e["activityTaskStartedEventAttributes"].get("attempt", 1))
        for e in history["events"]
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_STARTED"
        and e["activityTaskStartedEventAttributes"]["scheduledEventId"] in turns
    ]


async def test_sigkill_of_the_worker_during_a_shadow_run_of_20_tasks_completes_each_scored_once(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """20 recorded tasks are replayed 8 at a time by a worker process. Once the first 10 are done and
    the candidate's turns for the others are held in flight (a gate file), the worker is SIGKILLed
    while the run is still going; a new worker process takes the held turns over (their next
    attempt) and the run completes: 20 tasks in the report, the 5 diverged ones named, each task
    scored exactly once (the scorer's own log), and no business row beyond the 20 recorded."""
    env = config_env
    items = [f"item-{n:02d}" for n in range(20)]
    refs = await recorded_refs(env, items)
    assert env.business().count() == 20
    gate, scored_log = tmp_path / "gate", tmp_path / "scored.log"
    extra = {GATE_ENV: str(gate), SCORE_LOG_ENV: str(scored_log)}
    shadow_id = f"shadow-crash-{env.task_queue}"
    child = {item: f"{shadow_id}/{ref.task_id}" for item, ref in refs.items()}
    input = ShadowRunInput(candidate=CANDIDATE, scorer=SCORER, tasks=list(refs.values()), max_concurrency=8)

    async with worker_process(env, tmp_path / "worker-1.log", **extra) as first:
        handle = await env.client.start_workflow(
            SHADOW_RUN_WORKFLOW,
            input.model_dump(mode="json"),
            id=shadow_id,
            task_queue=env.task_queue,
            result_type=ShadowRunResult,
        )
        done = items[:GATED_FROM]

        async def first_half_done() -> bool:
            states = [await status(env, child[item]) for item in done]
            return all(s is WorkflowExecutionStatus.COMPLETED for s in states)

        await until(first_half_done, 180, "the ungated tasks to complete")

        async def turn_held() -> bool:
            described = await env.client.get_workflow_handle(child[items[GATED_FROM]]).describe()
            return any(
                a.activity_type.name == "shadow.turn" for a in described.raw_description.pending_activities
            )

        await until(turn_held, 120, "a gated turn to be in flight")
        assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
        await sigkill(first)

    gate.touch()
    async with worker_process(env, tmp_path / "worker-2.log", **extra):
        result = await asyncio.wait_for(handle.result(), 300)

    summary = result.summary
    assert (summary.tasks, summary.failed, summary.scored) == (20, 0, 20)
    assert summary.diverged_tasks == sorted(refs[item].task_id for item in DIVERGING)
    assert (summary.writes_proposed, summary.writes_executed) == (20, 0)
    assert env.business().count() == 20
    assert Counter(scored_log.read_text().split()) == Counter(ref.task_id for ref in refs.values())
    held = env.client.get_workflow_handle(child[items[GATED_FROM]])
    taken_over = json.loads((await held.fetch_history()).to_json())
    assert max(turn_attempts(taken_over)) >= 2  # the held turn was retried by the new worker
