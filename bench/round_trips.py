"""9. Round trips of the example task: workflow tasks and activities in its history, whole and after
the approval signal.

The bundled example (``examples/monthly_report/task.json``: the ``monthly-report`` agent with its
scripted model) is started through ``AgentWorkerClient`` as any client would, and approved by the
``submit_decision`` signal once it waits for ``finance-lead``. Its history is then counted: workflow
tasks completed (each a round trip of the worker with the server), activities scheduled, and local
activities (``core_local_activity`` markers: they run inside a workflow task, so they add no round
trip of their own but do add an event and worker time), for the whole task and for the events after
the ``WORKFLOW_EXECUTION_SIGNALED`` event. Counts are structural, not timed: each round's task is
the same, and the table gives the largest count of any round (they differ only when two results
happen to reach the worker in one workflow task).

Run: ``python -m bench.round_trips [--quick] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agent_worker.schemas.tasks import TaskPhase
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from agent_worker.client import AgentWorkerClient
from bench.common import REPO, Section, agent_worker, bench_config, dev_server, load, scratch

EXAMPLE = REPO / "examples" / "monthly_report" / "task.json"
APPROVER = "finance-lead"  # the example's policy
LOCAL_ACTIVITY_MARKER = "core_local_activity"


@dataclass
class Counts:
    """What one stretch of a history holds."""

    workflow_tasks: int = 0
    activities: Counter[str] = field(default_factory=Counter)
    local_activities: Counter[str] = field(default_factory=Counter)
    events: int = 0
    bytes: int = 0

    def add(self, event: HistoryEvent) -> None:
        self.events += 1
        self.bytes += event.ByteSize()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            self.workflow_tasks += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            self.activities[event.activity_task_scheduled_event_attributes.activity_type.name] += 1
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                self.local_activities[_local_activity_type(marker)] += 1


def _local_activity_type(marker: Any) -> str:
    """The activity type a local-activity marker records (in its ``data`` detail, as JSON)."""
    try:
        return json.loads(marker.details["data"].payloads[0].data)["activity_type"]
    except (KeyError, IndexError, ValueError):
        return "?"


def by_name(counter: Counter[str]) -> str:
    """``name N, name N`` (most first), or ``none``."""
    return ", ".join(f"{name} {n}" for name, n in counter.most_common()) or "none"


async def count_history(client: Any, task_id: str) -> tuple[Counts, Counts, int]:
    """(whole history, events after the first signal, runs) of the task's chain: a task that waits
    for a person continues as new as the wait begins (``short-wait-by-default``), so the runs
    before it are counted too."""
    from agent_worker.activities.task_history import chain_of

    whole, after = Counts(), Counts()
    signalled = False
    chain = await chain_of(client, await client.get_workflow_handle(task_id).fetch_history())
    for history in chain:
        for event in history.events:
            whole.add(event)
            if signalled:
                after.add(event)
            signalled = signalled or event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    return whole, after, len(chain)


async def _one(client: AgentWorkerClient, spec: dict[str, Any]) -> tuple[Counts, Counts, int]:
    ref = await client.start(spec)
    request = await client.next_request(ref.task_id, within=120)
    assert request.approvers == [APPROVER], request.approvers
    await client.decide(
        ref.task_id, request.request_id, "approve", APPROVER, version=request.version, via="signal"
    )
    result = await asyncio.wait_for(client.result(ref.task_id), 120)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert len(result.evidence.writes) == 1, result.evidence.writes
    return await count_history(client.temporal, ref.task_id)


def _worst(counts: list[Counts]) -> Counts:
    """The round with the most workflow tasks (then activities): the table's figures."""
    return max(counts, key=lambda c: (c.workflow_tasks, sum(c.activities.values())))


async def run(quick: bool = False, rounds: int | None = None) -> Section:
    rounds = rounds or (1 if quick else 3)
    section = Section("round_trips", "9. Round trips of the example task (monthly report)", load=load())
    began = time.perf_counter()
    spec = json.loads(EXAMPLE.read_text())
    measured: list[tuple[Counts, Counts, int]] = []
    with scratch("round-trips") as tmp:
        async with dev_server(tmp / "server") as server:
            config = bench_config(tmp / "data")
            client = AgentWorkerClient(server.client, config.task_queue)
            async with agent_worker(server.client, config):
                for _ in range(rounds):
                    measured.append(await _one(client, spec))
    section.seconds = time.perf_counter() - began
    whole, after = _worst([m[0] for m in measured]), _worst([m[1] for m in measured])
    runs = max(m[2] for m in measured)
    section.headers = ["measure", "whole task", "after the approval signal"]
    section.rows = [
        ["workflow tasks completed", str(whole.workflow_tasks), str(after.workflow_tasks)],
        ["activities scheduled", str(sum(whole.activities.values())), str(sum(after.activities.values()))],
        ["local activities (markers)", str(sum(whole.local_activities.values())),
         str(sum(after.local_activities.values()))],
        ["history events", str(whole.events), str(after.events)],
        ["history bytes", str(whole.bytes), str(after.bytes)],
    ]  # fmt: skip
    spread = {
        label: sorted({(m[i].workflow_tasks, sum(m[i].activities.values())) for m in measured})
        for i, label in enumerate(("whole", "after"))
    }
    section.notes += [
        f"Activities, whole task: {by_name(whole.activities)}; after the signal: "
        f"{by_name(after.activities)}.",
        f"Local activities, whole task: {by_name(whole.local_activities)}; after the signal: "
        f"{by_name(after.local_activities)}.",
        f"`{EXAMPLE.relative_to(REPO)}` with its scripted model, started by `AgentWorkerClient.start` and "
        f"approved by the `submit_decision` signal; {rounds} round(s), the table gives the one with the "
        f"most workflow tasks. (workflow tasks, activities) of every round: whole {spread['whole']}, "
        f"after the signal {spread['after']}.",
        f"Counted over every run of the task ({runs}): the task waits for its "
        "approver in a short run (`short-wait-by-default`), whose start is one workflow task more than "
        "the task's own work; after the signal, the counts are the short run's.",
    ]
    section.figures = {
        "workflow_tasks": whole.workflow_tasks,
        "activities": sum(whole.activities.values()),
        "local_activities": sum(whole.local_activities.values()),
        "events": whole.events,
        "bytes": whole.bytes,
        "after_signal_workflow_tasks": after.workflow_tasks,
        "after_signal_activities": sum(after.activities.values()),
        "after_signal_local_activities": sum(after.local_activities.values()),
        "after_signal_events": after.events,
        "rounds": rounds,
        # Runs of the task's chain: 2 when it waited for its approver in a short run, whose start is
        # one workflow task of the whole count.
        "runs": runs,
    }
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--rounds", type=int, help="times to run the example (default 3)")
    args = parser.parse_args()
    from bench.report import standalone

    standalone(run(args.quick, args.rounds), args.quick)


if __name__ == "__main__":
    main()
