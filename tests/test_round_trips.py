"""The example task's committed history (the bundled monthly report, approved by a ``temporal
workflow signal``; recorded by ``make histories``) costs no more round trips than the design's
minimum: 3 turns, 1 command and 1 write make 7 workflow tasks and 5 activities, and the approval
after its signal 3 and 2. A change that adds a workflow task or an activity to the example fails
here; the bench's ``round_trips`` section measures the same on a fresh run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers.histories import after_first_signal, round_trips

HISTORY = Path(__file__).parent / "histories" / "test_approval_by_temporal_cli_completes_with_evidence.json"
BEFORE = HISTORY.parent / "pre-minimum-round-trips" / HISTORY.name
# (workflow tasks, activities): the whole task, and from the approval signal on.
WHOLE = (7, 5)
AFTER_SIGNAL = (3, 2)


def events(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["events"]


def test_the_example_task_takes_at_most_the_design_s_round_trips() -> None:
    trips = round_trips(events(HISTORY))
    # It is the example: three turns, its one command and its one write, each once.
    assert sorted(trips.activities) == ["agent.turn"] * 3 + ["business.write", "sandbox.exec"]
    assert trips.workflow_tasks <= WHOLE[0] and len(trips.activities) <= WHOLE[1], trips


def test_the_approval_takes_at_most_three_workflow_tasks_and_two_activities_after_its_signal() -> None:
    after = round_trips(after_first_signal(events(HISTORY)))
    assert after.activities == ["business.write", "agent.turn"], after
    assert after.workflow_tasks <= AFTER_SIGNAL[0] and len(after.activities) <= AFTER_SIGNAL[1], after


def test_the_counts_can_fail_the_history_from_before_the_minimum_goes_past_them() -> None:
    """The same test on the run recorded before patch ``minimum-round-trips`` (14 workflow tasks
    and 12 activities when the issue was filed) would fail: the check is not vacuous."""
    before = round_trips(events(BEFORE))
    assert before.workflow_tasks > WHOLE[0] and len(before.activities) > WHOLE[1], before
    after = round_trips(after_first_signal(events(BEFORE)))
    assert after.workflow_tasks > AFTER_SIGNAL[0] and len(after.activities) > AFTER_SIGNAL[1], after
