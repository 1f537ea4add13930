"""Where the soak's agent turns and sandboxes ran, and the shared journal answering a task's turns on
either worker (``python -m bench.soak --stores shared``; see ``bench.soak_shared``).

The history says which worker ran each activity: the identity of its ``ActivityTaskStarted`` is the
worker's ``pid@host``, and the soak knows which slot ran each pid. A task whose turns ran on both
workers then has every turn run again (``agent.turn``, in this process, the same input as in the
history) with the config of a worker that did not run it: every model call must come from the
shared journal, and the turn must propose what it proposed.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent_worker.activities.agent import AgentActivities, AgentRegistry
from agent_worker.activities.stores.artifacts import build_artifact_store
from agent_worker.activities.stores.state import build_journal
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.sandbox import DestroySandboxResult
from agent_worker.schemas.turns import TurnInput, TurnResult
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment


@dataclass
class TurnRun:
    """One ``agent.turn`` of a task, as its history records it."""

    input: TurnInput
    result: TurnResult
    slot: int | None  # the worker that ran its last attempt (None: not a soak worker's pid)
    attempt: int
    opened: datetime  # scheduled
    closed: datetime  # completed
    # The worker whose SIGKILL ended the earlier attempts: the only worker killed while the turn was
    # open, when that is not the one that completed it (None: not retried, or not known).
    killed_on: int | None = None
    killed_at: datetime | None = None

    @property
    def retried_across(self) -> bool:
        """Retried on the other worker after its first worker was killed, with the calls that
        completed before the kill answered from the shared journal."""
        return self.killed_on is not None and self.result.usage.replayed_calls > 0


@dataclass
class TaskRuns:
    """Where one task's turns ran, and where its sandbox was made and destroyed."""

    turns: list[TurnRun] = field(default_factory=list)
    sandbox_made: list[int | None] = field(default_factory=list)
    # (worker, whether the sandbox was still there) per sandbox.destroy
    sandbox_destroyed: list[tuple[int | None, bool]] = field(default_factory=list)


async def task_runs(
    client: Client, task_id: str, slot_of_pid: dict[int, int], killed: Sequence[tuple[datetime, int]]
) -> TaskRuns:
    """The task's completed agent turns in order, with the worker slot that ran each, and the
    slots of its sandbox's create and destroy (from each activity's last ``ActivityTaskStarted``).
    ``killed``: the soak's SIGKILLs, (when, slot)."""
    converter = pydantic_data_converter.payload_converter
    kinds = {"agent.turn", "sandbox.create", "sandbox.destroy"}
    scheduled: dict[int, tuple[str, Any, datetime]] = {}
    started: dict[int, tuple[int | None, int]] = {}
    found = TaskRuns()
    history = await client.get_workflow_handle(task_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            kind = attrs.activity_type.name
            if kind in kinds:
                payload = None
                if kind == "agent.turn":
                    [payload] = converter.from_payloads(attrs.input.payloads, [TurnInput])
                scheduled[event.event_id] = (kind, payload, event.event_time.ToDatetime(UTC))
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.scheduled_event_id in scheduled:
                pid = attrs.identity.partition("@")[0]
                slot = slot_of_pid.get(int(pid)) if pid.isdigit() else None
                started[attrs.scheduled_event_id] = (slot, attrs.attempt)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            if attrs.scheduled_event_id not in scheduled:
                continue
            kind, turn_input, opened = scheduled[attrs.scheduled_event_id]
            slot, attempt = started.get(attrs.scheduled_event_id, (None, 0))
            if kind == "agent.turn":
                [result] = converter.from_payloads(attrs.result.payloads, [TurnResult])
                run = TurnRun(turn_input, result, slot, attempt, opened, event.event_time.ToDatetime(UTC))
                kills = [(at, n) for at, n in killed if run.opened <= at <= run.closed]
                if attempt > 1 and len({n for _, n in kills}) == 1 and kills[0][1] != slot:
                    run.killed_at, run.killed_on = kills[0]
                found.turns.append(run)
            elif kind == "sandbox.create":
                found.sandbox_made.append(slot)
            else:
                [destroyed] = converter.from_payloads(attrs.result.payloads, [DestroySandboxResult])
                found.sandbox_destroyed.append((slot, destroyed.existed))
    return found


@dataclass
class Placement:
    """Where the soak's turns and sandboxes ran."""

    tasks_on_both: list[str] = field(default_factory=list)
    turns: int = 0
    turns_by_slot: collections.Counter[int | None] = field(default_factory=collections.Counter)
    retried_replayed: int = 0  # turns retried after a kill whose completed calls came from the journal
    replayed_calls: int = 0
    retried_across: int = 0  # of those, retried on the other worker (TurnRun.retried_across)
    # sandbox.destroy that ran on another worker than the sandbox's create (so found nothing there)
    destroyed_elsewhere: int = 0
    runs: dict[str, TaskRuns] = field(default_factory=dict)


async def placement(
    client: Client,
    task_ids: Sequence[str],
    slot_of_pid: dict[int, int],
    killed: Sequence[tuple[datetime, int]],
) -> Placement:
    """Every task's turns and sandboxes, and the workers that ran them."""
    found = Placement()
    gate = asyncio.Semaphore(16)

    async def one(task_id: str) -> tuple[str, TaskRuns]:
        async with gate:
            return task_id, await task_runs(client, task_id, slot_of_pid, killed)

    for task_id, runs in await asyncio.gather(*(one(t) for t in task_ids)):
        found.runs[task_id] = runs
        found.turns += len(runs.turns)
        found.turns_by_slot.update(r.slot for r in runs.turns)
        if len({r.slot for r in runs.turns if r.slot is not None}) > 1:
            found.tasks_on_both.append(task_id)
        for run in runs.turns:
            if run.result.usage.replayed_calls:
                found.retried_replayed += 1
                found.replayed_calls += run.result.usage.replayed_calls
                found.retried_across += run.retried_across
        made = set(runs.sandbox_made)
        found.destroyed_elsewhere += sum(1 for slot, _ in runs.sandbox_destroyed if slot not in made)
    return found


@dataclass
class JournalShown:
    """One task's turns, each run again with the config of a worker that did not run it."""

    task_id: str
    lines: list[str]
    ok: bool


async def show_shared_journal(
    task_id: str, runs: Sequence[TurnRun], configs: Sequence[WorkerConfig]
) -> JournalShown:
    """Run each of the task's turns again (the same input, from the history) on the config of the
    other worker (its data dir, its view of the stores): every model call must be answered from the
    shared journal (``replayed_calls == model_calls``) and the turn must propose what it proposed."""
    lines, ok = [], True
    registry = AgentRegistry.from_import_paths(configs[0].agents)
    for run in runs:
        other = next(n for n in range(len(configs)) if n != run.slot)
        config = configs[other]
        store = build_artifact_store(config)
        try:
            activities = AgentActivities(registry, store, config, build_journal(config))
            again: TurnResult = await ActivityEnvironment().run(activities.turn, run.input)
        finally:
            store.close()
        usage = again.usage
        same = again.proposed == run.result.proposed and again.final_output == run.result.final_output
        held = usage.model_calls > 0 and usage.replayed_calls == usage.model_calls and same
        ok = ok and held
        ran_on = "?" if run.slot is None else run.slot + 1
        what = "answer" if run.result.status == "final" else "proposals"
        retried = ""
        if run.killed_on is not None and run.killed_at is not None:
            retried = (
                f", after worker {run.killed_on + 1} was SIGKILLed at {run.killed_at:%H:%M:%S} UTC, "
                "the only kill while the turn was open"
            )
        lines.append(
            f"turn {run.input.turn} ran on worker {ran_on} (attempt {run.attempt}{retried}; "
            f"{run.result.usage.replayed_calls} of {run.result.usage.model_calls} calls from the "
            f"journal); again on worker {other + 1}'s config: {usage.replayed_calls} of "
            f"{usage.model_calls} calls from the journal, {'same' if same else 'DIFFERENT'} {what}"
        )
    return JournalShown(task_id, lines, ok)
