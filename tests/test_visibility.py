"""Tasks waiting for a human are findable: through search attributes (the Temporal CLI and UI), the
`inbox` command, the `status` query, and the UI's current details."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from agent_worker.cli.devserver import temporal_binary
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas import visibility
from agent_worker.schemas.tasks import MIN_EVENTS_BEFORE_WAIT, TaskPhase, TaskResult
from agent_worker.schemas.visibility import AWAITING_QUERY
from agent_worker.workflows.visibility import SETTLE_SUMMARY
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHistory

from agent_worker.client import AgentWorkerClient
from tests.helpers.support import TaskEnv, assert_replays, example_spec, running_worker

DOCS = Path(__file__).parents[1] / "docs" / "approvals.md"


def listed_ids(env: TaskEnv, query: str) -> list[str]:
    """Workflow ids `temporal workflow list --query QUERY` prints, one per run it lists."""
    listed = subprocess.run(
        [temporal_binary(), "workflow", "list", "--address", env.address, "--query", query, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [w["execution"]["workflowId"] for w in json.loads(listed.stdout or "[]")]


async def until_listed(env: TaskEnv, query: str, task_id: str, *, listed: bool = True) -> None:
    """Wait until `temporal workflow list --query QUERY` lists the task (or, ``listed`` False, no
    longer does): visibility is eventually consistent."""
    for _ in range(50):
        if (task_id in await asyncio.to_thread(listed_ids, env, query)) is listed:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{task_id} {'never' if listed else 'still'} listed by {query!r}")


async def test_a_waiting_task_is_found_by_search_attributes_inbox_and_status(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """`temporal workflow list --query` finds it by phase, tenant and approver; `inbox --json` and
    `status --json` give the request id and version a human needs; the current details say what
    it waits for."""
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending

    query = (
        "AgentAwaitingApproval = true AND AgentTaskPhase = 'awaiting_approval' "
        "AND AgentTenant = 'acme' AND AgentApprovers = 'finance-lead' AND AgentName = 'monthly-report'"
    )
    await until_listed(env, query, handle.id)

    assert await asyncio.to_thread(cli_main, ["--address", env.address, "inbox", "--json"]) == 0
    inbox = json.loads(capsys.readouterr().out)
    [entry] = [e for e in inbox if e["task_id"] == handle.id]
    assert [(p["request_id"], p["version"]) for p in entry["pending"]] == [
        (request.request_id, request.version)
    ]

    assert await asyncio.to_thread(cli_main, ["--address", env.address, "status", handle.id, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["phase"] == "awaiting_approval"
    assert status["pending"][0]["version"] == request.version
    assert status["budgets"]["max_turns"] == 8

    assert await asyncio.to_thread(cli_main, ["--address", env.address, "status", handle.id]) == 0
    text = capsys.readouterr().out
    assert "temporal workflow signal" in text and request.version in text

    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "Waiting for approval" in metadata.current_details
    assert request.request_id in metadata.current_details and "finance-lead" in metadata.current_details
    await env.cancel(handle)


async def test_the_documented_query_lists_a_task_that_waits_in_a_short_run_once(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task that continued as new before its wait leaves a closed run that still carries
    ``AgentAwaitingApproval = true``: the attribute alone lists the task twice. The query
    docs/approvals.md shows (the client's ``AWAITING_QUERY``, running runs only) lists it once, and
    so does the inbox."""
    handle = await env.start({**example_spec(), "continue_as_new_before_wait": MIN_EVENTS_BEFORE_WAIT})
    await env.awaiting_approval(handle)
    documented = "AgentAwaitingApproval = true AND ExecutionStatus = 'Running'"
    assert documented == AWAITING_QUERY and f'--query "{documented}"' in DOCS.read_text()
    bare: list[str] = []
    for _ in range(100):  # visibility is eventually consistent
        bare = [
            i
            for i in await asyncio.to_thread(listed_ids, env, "AgentAwaitingApproval = true")
            if i == handle.id
        ]
        if len(bare) == 2:
            break
        await asyncio.sleep(0.2)
    assert len(bare) == 2, "the closed run before the wait still carries the attribute"
    assert [i for i in await asyncio.to_thread(listed_ids, env, documented) if i == handle.id] == [handle.id]
    assert await asyncio.to_thread(cli_main, ["--address", env.address, "inbox", "--json"]) == 0
    assert [e["task_id"] for e in json.loads(capsys.readouterr().out)].count(handle.id) == 1
    await env.cancel(handle)


async def test_inbox_lists_a_task_whose_worker_is_gone(
    config_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A waiting task whose workers all died is still in the inbox, from visibility, marked as
    unanswered, and the inbox does not hang on it."""
    env = config_env
    async with running_worker(env.client, env.config):
        handle = await env.start(example_spec())
        await env.awaiting_approval(handle)
    entries: list[dict] = []
    for _ in range(50):
        assert await asyncio.to_thread(cli_main, ["--address", env.address, "inbox", "--json"]) == 0
        entries = [e for e in json.loads(capsys.readouterr().out) if e["task_id"] == handle.id]
        if entries and "error" in entries[0]:
            break
        await asyncio.sleep(0.2)
    [entry] = entries
    assert entry["approvers"] == ["finance-lead"] and entry["tenant"] == "acme"
    assert "no worker answered" in entry["error"]
    async with running_worker(env.client, env.config):
        await env.cancel(handle)


def settle_timer_id(event: HistoryEvent) -> str | None:
    """The timer id of a ``TIMER_STARTED`` event that starts a settle timer (by its summary), else None."""
    if event.event_type != EventType.EVENT_TYPE_TIMER_STARTED:
        return None
    summary = event.user_metadata.summary.data if event.user_metadata.HasField("summary") else b""
    return (
        event.timer_started_event_attributes.timer_id
        if json.loads(summary or b"null") == SETTLE_SUMMARY
        else None
    )


def upserts(history: WorkflowHistory) -> list[tuple[str, dict[str, Any]]]:
    """Each search-attribute upsert of a history (but a patch marker's), with what set it off:
    ``first`` (the run's first), ``settled`` (the first workflow task after a settle timer fired),
    ``waits`` (the task waits for a person), ``ended`` (a terminal phase), else ``at once``; and the
    attributes it set."""
    found: list[tuple[str, dict[str, Any]]] = []
    settle_timers: set[str] = set()
    fired = False
    for event in history.events:
        if (timer_id := settle_timer_id(event)) is not None:
            settle_timers.add(timer_id)
        elif event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            fired = fired or event.timer_fired_event_attributes.timer_id in settle_timers
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            cause, fired = ("settled" if fired else None), False
        elif event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            values = {k: json.loads(v.data) for k, v in fields.indexed_fields.items()}
            if set(values) == {"TemporalChangeVersion"}:
                continue  # a patch marker's, not the task's
            phase = values.get(visibility.PHASE.name)
            if not found:
                why = "first"
            elif phase in ("awaiting_approval",):
                why = "waits"
            elif phase is not None and TaskPhase(phase).terminal:
                why = "ended"
            else:
                why = cause or "at once"
            found.append((why, values))
    return found


def settle_timers(history: WorkflowHistory) -> dict[str, str]:
    """How each settle timer of a history ended, by timer id: ``fired``, ``cancelled``, or
    ``running`` (still so when the run closed)."""
    timers: dict[str, str] = {}
    for event in history.events:
        if (started := settle_timer_id(event)) is not None:
            timers[started] = "running"
        elif event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            timer_id = event.timer_fired_event_attributes.timer_id
            if timer_id in timers:
                timers[timer_id] = "fired"
        elif event.event_type == EventType.EVENT_TYPE_TIMER_CANCELED:
            timer_id = event.timer_canceled_event_attributes.timer_id
            if timer_id in timers:
                timers[timer_id] = "cancelled"
    return timers


async def test_running_shows_at_once_and_the_short_phases_settle(env: TaskEnv) -> None:
    """On release 0.4 a change to ``running`` is published at once and only the short phases settle:
    the notes agent (a turn of seven model calls of 0.4 s) upserts ``received``, ``running`` and
    ``completed``, never ``initializing``, and no settle timer runs on into the turns (the change to
    ``running`` cancels the one ``initializing`` asked for; 0.3's fired during the turn, and one that
    fires while the task's last workflow task is open makes the server refuse the completion). On 0.3 the
    same task publishes ``running`` by its settle timer once it has lasted ``SETTLE_SECONDS``; on 0.2
    every phase at once (so each check can fail)."""
    current = await env.start({"agent": "notes", "prompt": "take your notes"})
    settled = await env.start({"agent": "notes", "prompt": "take your notes"}, release="0.3")
    at_once = await env.start({"agent": "notes", "prompt": "take your notes"}, release="0.2")
    for handle in (current, settled, at_once):
        result: TaskResult = await asyncio.wait_for(handle.result(), 90)
        assert result.phase is TaskPhase.COMPLETED, result.reason
    history = await current.fetch_history()
    published = [(why, values.get(visibility.PHASE.name)) for why, values in upserts(history)]
    assert published == [("first", "received"), ("at once", "running"), ("ended", "completed")], published
    assert set(settle_timers(history).values()) <= {"cancelled"}, settle_timers(history)
    found = upserts(await settled.fetch_history())
    assert {why for why, _ in found} <= {"first", "settled", "ended"}, found
    phases = [values.get(visibility.PHASE.name) for _, values in found]
    assert phases[0] == "received" and phases[-1] == "completed" and "initializing" not in phases
    assert ("settled", {visibility.PHASE.name: "running"}) in found, found
    old = upserts(await at_once.fetch_history())
    assert [values.get(visibility.PHASE.name) for _, values in old] == [
        "received", "initializing", "running", "completed"
    ]  # fmt: skip
    assert {why for why, _ in old} == {"first", "at once", "ended"}
    for handle in (current, settled, at_once):
        await assert_replays(env.client, handle.id)


async def test_a_decided_task_leaves_the_awaiting_list_at_once_and_no_settle_timer_outlives_its_write(
    env: TaskEnv,
) -> None:
    """Approved, the example task shows its wait at once (``AWAITING_QUERY`` lists it) and its end at
    once (the decision's own workflow task upserts ``AgentAwaitingApproval`` false, so a decided task
    leaves the list even if no worker takes its next step). Its write (``committing``) starts a settle
    timer, which the change back to ``running`` cancels before the last turn: nothing is upserted
    between the decision and the end, and no timer can fire while the task ends. Visibility then lists
    it no more."""
    client = AgentWorkerClient(env.client, env.task_queue)
    ref = await client.start(example_spec())
    request = await client.next_request(ref.task_id)
    await until_listed(env, AWAITING_QUERY, ref.task_id)
    await client.decide(ref.task_id, request.request_id, "approve", "finance-lead", version=request.version)
    result: TaskResult = await asyncio.wait_for(client.handle(ref.task_id).result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    history = await client.handle(ref.task_id).fetch_history()
    found_upserts = upserts(history)  # the newest run's: the one that waited
    phases = [values.get(visibility.PHASE.name) for _, values in found_upserts]
    after = found_upserts[phases.index("awaiting_approval") + 1 :]
    assert [why for why, _ in after] == ["at once", "ended"], after
    assert after[0][1][visibility.AWAITING_APPROVAL.name] is False, after
    assert set(settle_timers(history).values()) == {"cancelled"}, settle_timers(history)
    await until_listed(env, AWAITING_QUERY, ref.task_id, listed=False)
    await assert_replays(env.client, ref.task_id)
