"""The example task's committed history (the bundled monthly report, approved by a ``temporal
workflow signal``; recorded by ``make histories``) costs no more round trips than the design's
minimum (issue 21): 3 turns, 1 command and 1 write are 7 workflow tasks and 5 activities, and after the
approval signal 3 and 2. Its events go to the sink in local activities of workflow tasks that already
run (patch ``local-delivery``; docs/how-a-task-runs.md, "Round trips"). A change that adds a workflow
task or an activity to the example fails here; the bench's ``round_trips`` section measures a fresh run."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from agent_worker.workflows.patches import AFTER_0_2, ONE_MARKER_COVERS, PATCHES_AT_START

from tests.helpers.histories import after_first_signal, chain_events, earlier_runs, round_trips

HISTORY = Path(__file__).parent / "histories" / "test_approval_by_temporal_cli_completes_with_evidence.json"
BEFORE = HISTORY.parent / "pre-minimum-round-trips" / HISTORY.name
# (workflow tasks, activities): the whole task, and from the approval signal on.
WHOLE = (7, 5)
AFTER_SIGNAL = (3, 2)


events = chain_events


def test_the_example_task_takes_at_most_the_design_s_round_trips() -> None:
    """Counted over every run; the start of each short run the task waited in (one workflow task
    each, ``short-wait-by-default``) is not part of the task's own work."""
    trips = round_trips(events(HISTORY))
    own_work = trips.workflow_tasks - len(earlier_runs(HISTORY))
    # It is the example: three turns, its one command and its one write, each once; its two event
    # deliveries (before the wait for the approver, at the end) are local activities.
    assert sorted(trips.activities) == ["agent.turn"] * 3 + ["business.write", "sandbox.exec"]
    assert trips.local_activities.count("events.publish_here") == 2, trips
    assert own_work <= WHOLE[0] and len(trips.activities) <= WHOLE[1], trips


def test_the_approval_takes_at_most_three_workflow_tasks_and_two_activities_after_its_signal() -> None:
    after = round_trips(after_first_signal(events(HISTORY)))
    assert after.activities == ["business.write", "agent.turn"], after
    # The sandbox's removal and the last delivery; its tenant has no cap, so no place to release.
    assert after.local_activities == ["sandbox.destroy_here", "events.publish_here"], after
    assert after.workflow_tasks <= AFTER_SIGNAL[0] and len(after.activities) <= AFTER_SIGNAL[1], after


def test_the_counts_can_fail_the_history_from_before_local_delivery_goes_past_them() -> None:
    """The run recorded before patch ``local-delivery`` (9 and 7, then 4 and 3: two ``events.publish``
    activities, each with the workflow task that takes its result) would fail the counts above."""
    before = round_trips(events(HISTORY.parent / "pre-local-delivery" / HISTORY.name))
    assert before.workflow_tasks > WHOLE[0] and len(before.activities) > WHOLE[1], before
    assert before.activities.count("events.publish") == 2, before


def patch_events(history: list[dict[str, Any]]) -> tuple[int, int]:
    """(patch markers, ``TemporalChangeVersion`` upserts) in a history."""
    markers = [
        e
        for e in history
        if e["eventType"] == "EVENT_TYPE_MARKER_RECORDED"
        and e["markerRecordedEventAttributes"]["markerName"] == "core_patch"
    ]
    upserts = [
        e
        for e in history
        if e["eventType"] == "EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"
        and "TemporalChangeVersion"
        in e["upsertWorkflowSearchAttributesEventAttributes"]["searchAttributes"]["indexedFields"]
    ]
    return len(markers), len(upserts)


def test_the_example_task_asks_its_patches_with_one_marker() -> None:
    """On 0.1 every patch declared before ``one-marker`` is taken on that one marker: one marker and
    one ``TemporalChangeVersion`` upsert for them all, plus one of each for every later patch declared
    by 0.2 (when that run was recorded), where the run recorded before it had two events per patch.
    On 0.2 (the committed history, recorded before any patch of ``AFTER_0_2``) there is none at all:
    the release folded them all."""
    later = len(set(PATCHES_AT_START) - ONE_MARKER_COVERS - AFTER_0_2)
    on_0_1 = patch_events(events(HISTORY.parent / "pre-release-0.2" / HISTORY.name))
    assert later < 5 and on_0_1 == (1 + later, 1 + later)
    before = patch_events(events(HISTORY.parent / "pre-one-marker" / HISTORY.name))
    assert before[0] >= 18 and before[1] >= 18, before
    assert patch_events(events(HISTORY)) == (0, 0)


def test_the_counts_can_fail_the_history_from_before_the_minimum_goes_past_them() -> None:
    """The same test on the run recorded before patch ``minimum-round-trips`` (14 workflow tasks
    and 12 activities when the issue was filed) would fail: the check is not vacuous."""
    before = round_trips(events(BEFORE))
    assert before.workflow_tasks > WHOLE[0] and len(before.activities) > WHOLE[1], before
    after = round_trips(after_first_signal(events(BEFORE)))
    assert after.workflow_tasks > AFTER_SIGNAL[0] and len(after.activities) > AFTER_SIGNAL[1], after


def publish_inputs(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decoded inputs of every ``events.publish`` the history schedules."""
    return [
        json.loads(base64.b64decode(a["input"]["payloads"][0]["data"]))
        for e in history
        if (a := e.get("activityTaskScheduledEventAttributes"))
        and a["activityType"]["name"] == "events.publish"
    ]


def test_the_example_delivers_its_events_packed_in_two_thirds_of_the_bytes() -> None:
    """Since patch ``packed-events`` the example's two deliveries carry every event packed, none whole,
    and take at most two thirds of the bytes the same deliveries took whole (``pre-packed-events``).
    Read from the run before ``local-delivery``, whose deliveries are activities with their input in
    the history (a local activity's input is not recorded at all)."""
    now = publish_inputs(events(HISTORY.parent / "pre-local-delivery" / HISTORY.name))
    before = publish_inputs(events(HISTORY.parent / "pre-packed-events" / HISTORY.name))
    assert len(now) == len(before) == 2
    assert all(d["events"] == [] and d["packed"] for d in now), now
    assert [len(d["packed"]) for d in now] == [len(d["events"]) for d in before]
    size = sum(len(json.dumps(d)) for d in now)
    size_before = sum(len(json.dumps(d)) for d in before)
    assert size <= 2 / 3 * size_before, (size, size_before)
