"""A long task's result stays bounded and its history holds each command record once (patch
``lean-evidence``): the result keeps the newest ``inline_evidence`` records (20 by default) and
archives the older ones by the digests ``sandbox.exec`` stored them under; a record the store lacks
(run by a worker that did not store it) is archived inline instead, and nothing is lost either way.
A turn that continues the run reads neither the prompt nor a result's preview, so neither is sent."""

from __future__ import annotations

import asyncio
import json

import agent_worker.activities.sandbox.activities as sandbox_activities
import pytest
from agent_worker.schemas.sandbox import CommandRecord, record_digest
from agent_worker.schemas.tasks import INLINE_EVIDENCE, EvidenceArchive, TaskPhase, TaskResult
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHandle

from tests.helpers.support import TaskEnv, assert_replays


def _scheduled(events: list[HistoryEvent], name: str) -> list[bytes]:
    """The input payloads of the activities named ``name`` the history scheduled."""
    return [
        e.activity_task_scheduled_event_attributes.input.payloads[0].data
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == name
    ]


def _results(events: list[HistoryEvent]) -> list[bytes]:
    """The result payloads of the activities and local activities of the history."""
    out = []
    for e in events:
        if e.HasField("activity_task_completed_event_attributes"):
            out.append(e.activity_task_completed_event_attributes.result.payloads[0].data)
        elif e.HasField("marker_recorded_event_attributes"):
            details = e.marker_recorded_event_attributes.details
            if "result" in details and details["result"].payloads:
                out.append(details["result"].payloads[0].data)
    return out


async def _counted(env: TaskEnv, handle: WorkflowHandle, n: int) -> tuple[TaskResult, list[CommandRecord]]:
    """The finished result of a ``count to n`` task, and its records as the archive parts and the
    result hold them, oldest first (every one of them exactly once)."""
    result: TaskResult = await asyncio.wait_for(handle.result(), 180)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    parts = [EvidenceArchive.model_validate_json(env.store().get(r.digest)) for r in result.evidence.archived]
    assert [p.part for p in parts] == list(range(1, len(parts) + 1))
    records = [c for p in parts for c in p.commands] + result.evidence.commands
    assert [c.call_id for c in records] == [f"call_count_{k}" for k in range(1, n + 1)]
    assert result.evidence.missing == [] and result.evidence_complete
    return result, records


async def test_a_long_task_keeps_the_newest_records_inline_and_archives_the_rest_by_digest(
    env: TaskEnv,
) -> None:
    """24 commands on the default: the result holds the newest 20, the 4 older ones are in an archive
    part made from the stored records (the archive's input names them by digest, it does not carry
    them), and each archived record is the one the task recorded when its command ran."""
    n = 24
    handle = await env.start({"agent": "counter", "prompt": f"count to {n}", "budgets": {"max_turns": 40}})
    result, records = await _counted(env, handle, n)
    assert [c.call_id for c in result.evidence.commands] == [
        f"call_count_{k}" for k in range(n - INLINE_EVIDENCE + 1, n + 1)
    ]
    assert len(result.evidence.archived) == 1

    events = (await handle.fetch_history()).events
    assert _scheduled(events, "artifacts.archive") == [], "every record was stored: none goes inline"
    [archive_input] = _scheduled(events, "artifacts.archive_stored")
    archive = json.loads(archive_input)
    older = records[: n - INLINE_EVIDENCE]
    assert archive["commands"] == [record_digest(c) for c in older]
    assert len(archive_input) < 100 * len(older), "the archive's input should name records, not carry them"
    # What the task recorded of each archived command (the first one's activity result, the others'
    # markers), less the sandbox the first one made, is what the archive part holds.
    recorded = {
        c.call_id: c.model_copy(update={"sandbox": None})
        for data in _results(events)
        if b'"stdout_artifact"' in data
        for c in [CommandRecord.model_validate_json(data)]
    }
    assert [recorded[c.call_id] for c in older] == older

    # Turns after the first continue the run: no prompt, no preview of a result read by reference.
    turns = [json.loads(data) for data in _scheduled(events, "agent.turn")]
    assert turns[0]["prompt"] == f"count to {n}"
    for turn in turns[1:]:
        assert turn["prompt"] == ""
        for r in turn["results"]:
            assert r["output_ref"] and r["output"] == "", r
    await assert_replays(env.client, handle.id)


async def test_records_a_worker_did_not_store_are_archived_inline_and_nothing_is_lost(
    env: TaskEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands run by a worker that does not store its records (one from before, here simulated):
    the archive by digest finds them missing and fails for good, the task archives the same part with
    the records inline, and the result is as complete as with stored records."""
    monkeypatch.setattr(sandbox_activities, "stored_record", lambda record: b"not the record")
    n = 5
    handle = await env.start({"agent": "counter", "prompt": f"count to {n}", "inline_evidence": 2})
    result, records = await _counted(env, handle, n)
    assert [c.call_id for c in result.evidence.commands] == ["call_count_4", "call_count_5"]
    events = (await handle.fetch_history()).events
    [by_digest] = _scheduled(events, "artifacts.archive_stored")
    [inline] = _scheduled(events, "artifacts.archive")
    assert json.loads(by_digest)["commands"] == [record_digest(c) for c in records[:3]]
    failed = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in events
        if e.HasField("activity_task_failed_event_attributes")
    ]
    assert failed == ["artifact_not_found"]
    assert [c["call_id"] for c in json.loads(inline)["commands"]] == [
        "call_count_1",
        "call_count_2",
        "call_count_3",
    ]
    await assert_replays(env.client, handle.id)
