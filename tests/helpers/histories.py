"""Reading a task's history as the server keeps it: its round trips, and its local activities (which
appear only as markers)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory

SIGNALED = "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"


def earlier_runs(path: Path) -> list[Path]:
    """The earlier runs of the committed chain ``path`` is the newest run of, oldest first: ``make
    histories`` records them as ``NAME.runN.json`` (a task that waited for a person in a short run)."""
    return sorted(path.parent.glob(f"{path.stem}.run*.json"), key=lambda p: int(p.stem.rsplit("run", 1)[1]))


def chain_files(path: Path) -> list[Path]:
    """Every run of the committed chain ``path`` is the newest run of, oldest first."""
    return [*earlier_runs(path), path]


def chain_events(path: Path) -> list[dict[str, Any]]:
    """The events of every run of the committed chain, oldest first (counted, not numbered)."""
    return [e for run in chain_files(path) for e in json.loads(run.read_text())["events"]]


@dataclass(frozen=True)
class RoundTrips:
    """What a stretch of history cost: workflow tasks completed, activities scheduled (by type, in
    order), and local activities run inside workflow tasks (by type, in order)."""

    workflow_tasks: int
    activities: list[str]
    local_activities: list[str]


def events_of(history: WorkflowHistory | dict[str, Any]) -> list[dict[str, Any]]:
    """The history's events as the JSON the server and ``temporal workflow show`` give."""
    data = json.loads(history.to_json()) if isinstance(history, WorkflowHistory) else history
    return data["events"]


def local_activity_type(event: dict[str, Any]) -> str | None:
    """The activity type a local-activity marker records, or None for any other event."""
    marker = event.get("markerRecordedEventAttributes")
    if not marker or marker.get("markerName") != "core_local_activity":
        return None
    [payload] = marker["details"]["data"]["payloads"]
    return json.loads(base64.b64decode(payload["data"]))["activity_type"]


def round_trips(events: list[dict[str, Any]]) -> RoundTrips:
    """Count ``events``' workflow tasks, activities and local activities."""
    return RoundTrips(
        workflow_tasks=sum(e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_COMPLETED" for e in events),
        activities=[
            e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
            for e in events
            if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
        ],
        local_activities=[t for e in events if (t := local_activity_type(e)) is not None],
    )


def after_first_signal(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events from the first signal on (all of an approval's cost)."""
    first = next(i for i, e in enumerate(events) if e["eventType"] == SIGNALED)
    return events[first:]


__all__ = ["RoundTrips", "after_first_signal", "events_of", "local_activity_type", "round_trips"]
