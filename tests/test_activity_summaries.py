"""Every activity a task schedules carries a summary, so the Temporal UI reads without the status
query (``workflows/options.py``)."""

from __future__ import annotations

import asyncio
import json

from agent_worker.schemas.tasks import TaskPhase
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType

from tests.helpers.support import TaskEnv, example_spec, task_events


def _text(payload: Payload) -> str:
    return json.loads(payload.data) if payload.data else ""


async def test_every_scheduled_activity_and_local_activity_has_a_summary_naming_its_step(
    env: TaskEnv,
) -> None:
    """The monthly report, approved, runs admission, ingest, turns, a sandbox command, a write and its
    lookups, event delivery and the sandbox's removal; each shows a summary in the history, the turns
    numbered and the write named by its operation key."""
    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    await env.approve(handle)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED

    summaries: dict[str, list[str]] = {}
    for event in await task_events(env.client, handle.id):  # both runs: it waits in a short one
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and (
            event.marker_recorded_event_attributes.marker_name == "core_local_activity"
        ):
            name = "local activity"
        else:
            continue
        summary = _text(event.user_metadata.summary)
        assert summary, f"{name} (event {event.event_id}) has no summary"
        summaries.setdefault(name, []).append(summary)

    assert [s.split(" (")[0] for s in summaries["agent.turn"][:2]] == ["agent turn 1", "agent turn 2"]
    assert summaries["agent.turn"][1] == "agent turn 2 (1 results, 0 follow-ups)"
    [write] = summaries["business.write"]
    [evidence_write] = result.evidence.writes
    assert write.endswith(evidence_write.operation_key)
    assert {"sandbox.exec"} <= set(summaries)
    assert "in a new sandbox" in summaries["sandbox.exec"][0]
    assert "events.publish" not in summaries  # delivered locally (patch ``local-delivery``)
    local = summaries["local activity"]
    assert sum(s.startswith("deliver events") for s in local) == 2, local
    for step in ("admit to tenant", "store the task's 3 inputs", "destroy sandbox"):
        assert any(s.startswith(step) for s in local), (step, local)
