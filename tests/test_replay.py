"""Committed histories of real runs replay against the current workflow code: a change that would
break tasks in flight fails here (refresh them with `make histories` only for intended changes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows import AgentTaskWorkflow

HISTORIES = Path(__file__).parent / "histories"
EXPECTED = {
    "test_approval_by_temporal_cli_completes_with_evidence",
    "test_edit_writes_the_edited_arguments_and_records_both_versions",
    "test_reject_shows_the_model_the_message_and_writes_nothing",
}


def test_the_committed_histories_are_all_there() -> None:
    """The approve, edit and reject paths each have a committed history."""
    assert EXPECTED <= {p.stem for p in HISTORIES.glob("*.json")}


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_committed_history_replays(path: Path) -> None:
    """The history replays without nondeterminism."""
    data = json.loads(path.read_text())
    history = WorkflowHistory.from_json(path.stem, data)
    replayer = Replayer(workflows=[AgentTaskWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
