"""Release lines: a task our client starts begins on the current line (0.4) and takes every patch it
folded as base behaviour, so its history holds no marker of them (and no ``TemporalChangeVersion``
upsert for them), through its continue-as-new runs and its sub-tasks: only the patches declared after
the line (``AFTER_0_4``, none yet) would record theirs. A start on 0.2 still runs as 0.2 did (the
marker of ``short-wait-by-default``, every phase published at once; ``test_visibility.py`` runs the
phases of 0.3 and 0.4 side by side); a raw start that names no
release runs as on 0.1, asking each patch. The committed histories of earlier lines replay in
``test_replay.py``."""

from __future__ import annotations

import asyncio
import json
import time
import tomllib
from pathlib import Path
from typing import Any, get_args

import pytest
from agent_worker.schemas.tasks import (
    CURRENT_RELEASE,
    FIRST_RELEASE,
    Release,
    TaskInput,
    TaskPhase,
    TaskResult,
)
from agent_worker.schemas.validation import InvalidPayload, parse_task_input
from agent_worker.workflows import patches
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowHistory

import agent_worker
from agent_worker.client import AgentWorkerClient
from tests.helpers.support import TaskEnv, assert_replays, example_spec, run_ids

REPO = Path(__file__).resolve().parent.parent
PATCH_MARKER = "core_patch"
CHANGE_VERSION = "TemporalChangeVersion"


def patch_markers(history: WorkflowHistory) -> list[str]:
    """The patch markers and ``TemporalChangeVersion`` upserts in a fetched history, by event type."""
    found = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            if event.marker_recorded_event_attributes.marker_name == PATCH_MARKER:
                found.append("marker")
        elif event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if CHANGE_VERSION in fields.indexed_fields:
                found.append("upsert")
    return found


def recorded_patches(history: WorkflowHistory) -> list[str]:
    """The patch ids a fetched history's patch markers record, in order."""
    return [
        json.loads(payload.data)["id"]
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and event.marker_recorded_event_attributes.marker_name == PATCH_MARKER
        for details in event.marker_recorded_event_attributes.details.values()
        for payload in details.payloads
    ]


def only_later_patches(history: WorkflowHistory, after: frozenset[str] = patches.AFTER_0_4) -> bool:
    """Whether a run's history records the patches declared after its line (``after``) and nothing its
    line folded: one marker and one ``TemporalChangeVersion`` upsert for each of ``after``."""
    later = sorted(after)
    kinds = patch_markers(history)
    return sorted(recorded_patches(history)) == later and kinds == ["marker", "upsert"] * len(later)


def started_input(history: WorkflowHistory) -> TaskInput:
    """The task input a run's history begins with (as the workflow reads it: a bare spec too)."""
    started = history.events[0].workflow_execution_started_event_attributes
    return parse_task_input(json.loads(started.input.payloads[0].data))


async def approved_history(env: TaskEnv, handle: WorkflowHandle[Any, TaskResult]) -> WorkflowHistory:
    """Approve the example task's one request, check it completed with its evidence, and return its
    newest run's history."""
    [request] = (await env.awaiting_approval(handle)).pending
    client = AgentWorkerClient(env.client, env.task_queue)
    await client.decide(handle.id, request.request_id, "approve", "finance-lead", version=request.version)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and result.evidence.missing == []
    return await handle.fetch_history()


def test_the_package_is_version_0_4_0_and_its_client_starts_release_line_0_4() -> None:
    """pyproject.toml and ``agent_worker.__version__`` say 0.4.0, the release line a client starts
    is its major.minor, and ``workflows.patches.FOLDED`` knows every release line an input may name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["version"] == agent_worker.__version__ == "0.4.0"
    assert CURRENT_RELEASE == "0.4" == ".".join(agent_worker.__version__.split(".")[:2])
    assert set(patches.FOLDED) == set(get_args(Release)) and FIRST_RELEASE == "0.1"


def test_an_input_without_a_release_is_0_1_and_an_unknown_release_is_refused_by_name() -> None:
    """A raw start's input (bare spec or ``{"spec": ...}``) names no release and stays without one
    when sent on (so a 0.1 worker still reads it); a release this code does not know is refused,
    naming the field."""
    spec = example_spec()
    assert parse_task_input(spec).release is None
    assert "release" not in parse_task_input({"spec": spec}).model_dump(mode="json")
    assert parse_task_input({"spec": spec, "release": "0.2"}).release == "0.2"
    assert parse_task_input({"spec": spec, "release": "0.3"}).release == "0.3"
    assert parse_task_input({"spec": spec, "release": "0.4"}).release == "0.4"
    with pytest.raises(InvalidPayload, match="release"):
        parse_task_input({"spec": spec, "release": "0.5"})


async def test_the_example_task_started_by_the_client_records_no_folded_patch_marker(env: TaskEnv) -> None:
    """The example task, started and approved through ``AgentWorkerClient``, begins on 0.4, completes
    with its evidence, and its history has no marker and no ``TemporalChangeVersion`` upsert of a
    patch 0.4 folded, only those of the patches after it (none yet); it replays."""
    client = AgentWorkerClient(env.client, env.task_queue)
    ref = await client.start(example_spec())
    request = await client.next_request(ref.task_id)
    await client.decide(ref.task_id, request.request_id, "approve", "finance-lead", version=request.version)
    result: TaskResult = await asyncio.wait_for(client.handle(ref.task_id).result(), 60)
    assert result.phase is TaskPhase.COMPLETED and result.evidence.missing == []
    history = await client.handle(ref.task_id).fetch_history()
    assert started_input(history).release == "0.4"
    assert only_later_patches(history), recorded_patches(history)
    await assert_replays(env.client, ref.task_id)


async def test_a_start_on_0_2_still_runs_as_0_2(env: TaskEnv) -> None:
    """The example started on 0.2 (what a 0.2 client sends, and every 0.2 task in flight) records the
    marker of each patch declared after 0.2.0 in each run, as before 0.3.0, and completes the same
    way; the check fails on a 0.4 run's history (no such marker)."""
    handle = await env.start(example_spec(), release="0.2")
    history = await approved_history(env, handle)
    assert started_input(history).release == "0.2"
    assert patches.AFTER_0_2 and only_later_patches(history, patches.AFTER_0_2), recorded_patches(history)
    await assert_replays(env.client, handle.id)


async def test_a_raw_start_without_a_release_asks_its_patches_as_on_0_1(env: TaskEnv) -> None:
    """The same example started raw, with the bare spec (as any Temporal client may), runs as on 0.1:
    it records its patch markers (the one marker and one for each patch after it), so the check above
    can fail, and completes the same way."""
    handle = await env.start(example_spec(), release=None)
    history = await approved_history(env, handle)
    assert started_input(history).release is None
    later = len(set(patches.PATCHES_AT_START) - patches.ONE_MARKER_COVERS)
    assert patch_markers(history).count("marker") == 1 + later
    await assert_replays(env.client, handle.id)
    # docs/upgrading.md's query for the tasks still on 0.1 finds it (visibility catches up shortly).
    # (Its newest run: the example waits for its approver in a short run, and each run asks.)
    query = (
        f"WorkflowId = '{handle.id}' AND TemporalChangeVersion = '{patches.ONE_MARKER_PATCH}' "
        "AND ExecutionStatus = 'Completed'"
    )
    deadline = time.monotonic() + 30
    while (await env.client.count_workflows(query)).count != 1:
        assert time.monotonic() < deadline, f"visibility never found {query!r}"
        await asyncio.sleep(0.5)


async def test_continue_as_new_runs_and_sub_tasks_of_a_0_4_task_stay_on_0_4(env: TaskEnv) -> None:
    """A 0.4 task's continue-as-new runs and a 0.4 task's sub-task each begin on 0.4 and record no
    marker of a patch 0.4 folded."""
    counting = await env.start(
        {"agent": "counter", "prompt": "count to 12", "continue_as_new_after_events": 50}
    )
    parent = await env.start({"agent": "manager", "prompt": "delegate to shell: run: echo from-the-child"})
    counted: TaskResult = await asyncio.wait_for(counting.result(), 120)
    delegated: TaskResult = await asyncio.wait_for(parent.result(), 60)
    assert counted.phase is TaskPhase.COMPLETED and delegated.phase is TaskPhase.COMPLETED
    runs = await run_ids(env.client, counting.id)
    assert len(runs) >= 2, "the task should have continued as new"
    [delegation] = delegated.evidence.delegations
    for workflow_id, run_id in [
        *((counting.id, run) for run in runs),
        (parent.id, None),
        (delegation.task_id, None),
    ]:
        history = await env.client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        assert started_input(history).release == "0.4", (workflow_id, run_id)
        assert only_later_patches(history), (workflow_id, run_id, recorded_patches(history))
    await assert_replays(env.client, counting.id)
    await assert_replays(env.client, parent.id)
