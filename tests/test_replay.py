"""Committed histories of real runs replay against the current workflow code: a change that would
break tasks in flight fails here (refresh them with `make histories` only for intended changes)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from agent_worker.schemas.visibility import WORKFLOW_TYPE
from agent_worker.workflows.patches import FOLDED_AT_0_2, FOLDED_AT_0_3, FOLDED_AT_0_4

from tests.helpers.matrix import Record, record
from tests.helpers.support import HISTORY_IDS, replay_committed

HISTORIES = Path(__file__).parent / "histories"
EXPECTED = {
    "test_approval_by_temporal_cli_completes_with_evidence",
    "test_edit_writes_the_edited_arguments_and_records_both_versions",
    "test_reject_shows_the_model_the_message_and_writes_nothing",
    "test_delegated_sub_task_runs_as_a_child_and_its_answer_returns",
    "test_failed_child_is_reported_to_the_parent_agent",
    "test_follow_up_input_reaches_the_next_turn",
    "test_model_call_budget_hands_off_with_the_reason",
    "test_task_completes_across_continue_as_new",
    "test_retryable_errors_are_retried_by_temporal_honouring_retry_after",
}


def test_the_committed_histories_are_all_there() -> None:
    """Approve, edit, reject, sub-tasks, follow-up input, budgets, continue-as-new and provider
    retries each have a committed history."""
    for folder in (
        HISTORIES,
        HISTORIES / "pre-deliver-events",
        HISTORIES / "pre-reauthorize",
        HISTORIES / "pre-role-queues",
        HISTORIES / "pre-colocated-dispatch",
        HISTORIES / "pre-bounded-payloads",
        HISTORIES / "pre-parallel-batch",
        HISTORIES / "pre-threads",
        HISTORIES / "pre-minimum-round-trips",
        HISTORIES / "pre-one-marker",
        HISTORIES / "pre-exec-here",
        HISTORIES / "pre-packed-events",
        HISTORIES / "pre-local-delivery",
        HISTORIES / "pre-lean-evidence",
        HISTORIES / "pre-release-0.2",
        HISTORIES / "pre-release-0.3",
        HISTORIES / "pre-release-0.4",
    ):
        assert EXPECTED <= {p.stem for p in folder.glob("*.json")}, folder


def test_make_histories_records_every_committed_history_from_its_one_list() -> None:
    """`make histories` runs the tests listed in tests/recorded_histories.txt: each listed file and
    test exists, and each history at the top of tests/histories/ is recorded by a listed test (so a
    refresh rewrites them all and none goes stale unnoticed)."""
    tests = Path(__file__).parent
    listed = [
        line.strip()
        for line in (tests / "recorded_histories.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "recorded_histories.txt" in (tests.parent / "Makefile").read_text()
    recorded: set[str] = set()
    for node in listed:
        file, _, name = node.partition("::")
        source = (tests.parent / file).read_text()
        names = set(re.findall(r"^(?:async )?def (test_\w+)", source, re.M))
        assert not name or name in names, f"{node}: no such test"
        recorded |= {name} if name else names
    # An earlier run of a recorded chain is NAME.runN.json (``support.assert_replays``).
    committed = {p.stem.split(".")[0] for p in HISTORIES.glob("*.json") if p.name != HISTORY_IDS}
    assert committed <= recorded, f"not recorded by make histories: {sorted(committed - recorded)}"


def patch_ids(history_file: Path) -> set[str]:
    """The ``workflow.patched`` ids a committed history carries (its patch markers)."""
    found = set()
    for event in json.loads(history_file.read_text())["events"]:
        marker = event.get("markerRecordedEventAttributes", {})
        if marker.get("markerName") == "core_patch":
            for details in marker["details"].values():
                for payload in details["payloads"]:
                    found.add(json.loads(base64.b64decode(payload["data"]))["id"])
    return found


def test_every_patch_has_histories_from_both_sides() -> None:
    """Every patch id the workflows declare is replayed from a history that has it and from one that
    does not (a run from before the change), so both branches of each ``workflow.patched`` keep
    replaying."""
    declared = {
        match
        for source in (Path(__file__).parent.parent / "workflows").glob("*.py")
        for match in re.findall(r'^\w+_PATCH = "([\w-]+)"', source.read_text(), re.M)
    }
    assert len(declared) >= 5
    markers = [patch_ids(p) for p in HISTORY_FILES]
    for patch in sorted(declared):
        assert any(patch in m for m in markers), f"no committed history has patch {patch!r}"
        assert any(patch not in m for m in markers), f"no committed history predates patch {patch!r}"


def started_release(history_file: Path) -> str | None:
    """The release line a committed history's run began on (``TaskInput.release``; None: 0.1)."""
    started = json.loads(history_file.read_text())["events"][0]["workflowExecutionStartedEventAttributes"]
    raw = json.loads(base64.b64decode(started["input"]["payloads"][0]["data"]))
    return raw.get("release") if isinstance(raw, dict) else None


def is_task(history_file: Path) -> bool:
    """Whether a committed history is an ``AgentTask`` run (not the doctor's or the reaper's)."""
    started = json.loads(history_file.read_text())["events"][0]["workflowExecutionStartedEventAttributes"]
    return started["workflowType"]["name"] == WORKFLOW_TYPE


def test_histories_of_the_current_code_are_0_4_runs_without_a_folded_patch_s_marker() -> None:
    """The histories at the top of tests/histories/ are runs begun on 0.4 (what ``make histories``
    records now) that carry no marker of a patch 0.4 folded; those recorded on 0.3
    (``pre-release-0.4/``) and on 0.2 (``pre-release-0.3/``) name their line and carry only the
    markers of the patches after it; those recorded before 0.2.0 (``pre-release-0.2/``, the 0.1.x runs)
    name no release and carry the markers they always did. All replay below as they are."""
    current = [p for p in HISTORY_FILES if p.parent == HISTORIES and is_task(p)]
    assert len(current) >= len(EXPECTED)
    for path in current:
        assert started_release(path) == "0.4", path.name
        assert not patch_ids(path) & FOLDED_AT_0_4, path.name
    lines = (("pre-release-0.4", "0.3", FOLDED_AT_0_3), ("pre-release-0.3", "0.2", FOLDED_AT_0_2))
    for folder, line, folded in lines:
        earlier = [p for p in HISTORY_FILES if p.parent.name == folder and is_task(p)]
        assert len(earlier) >= len(EXPECTED), folder
        for path in earlier:
            assert started_release(path) == line, path.name
            assert not patch_ids(path) & folded, path.name
    before = [p for p in HISTORY_FILES if p.parent.name == "pre-release-0.2" and is_task(p)]
    assert before and all(started_release(p) is None for p in before)
    assert all(patch_ids(p) for p in before), "every 0.1.x run asked its patches"


# tests/histories/ holds histories of the current code; each subfolder, those recorded before a
# change guarded by workflow.patched (named after it), so both sides of every patch keep replaying.
HISTORY_FILES = sorted(p for p in HISTORIES.rglob("*.json") if p.name != HISTORY_IDS)


@pytest.mark.parametrize("path", HISTORY_FILES, ids=lambda p: str(p.relative_to(HISTORIES).with_suffix("")))
async def test_committed_history_replays(path: Path, record_property: Record) -> None:
    """The history replays without nondeterminism."""
    await replay_committed(path)
    side = path.parent.name if path.parent != HISTORIES else "current code"
    # Replaying runs no activities: nothing can be duplicated, lost or left behind.
    record(record_property, observed=f"replays ({side})", duplicates=None, lost=None, leftover=None)
