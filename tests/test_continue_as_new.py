"""A task carries its whole state across continue-as-new: on a server that suggests it every few
events, the example still waits for approval, binds the approval, writes once and completes. The
carried state stays bounded: older evidence moves to the artifact store, and a state too large to
carry hands the task off, explained."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from agent_worker.activities.events import JsonlEventSink
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.tasks import (
    DEFAULT_EVENTS_BEFORE_WAIT,
    MIN_EVENTS_BEFORE_WAIT,
    EvidenceArchive,
    TaskInput,
    TaskPhase,
    TaskResult,
)
from agent_worker.schemas.validation import InvalidPayload, parse_task_input
from agent_worker.workflows import AgentTaskWorkflow
from agent_worker.workflows.patches import AFTER_0_4
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.helpers.support import (
    DevServer,
    TaskEnv,
    assert_replays,
    connect,
    example_spec,
    launch_dev_server,
    make_config,
    run_ids,
    running_worker,
)


@pytest.fixture(scope="module")
def eager_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = launch_dev_server(
        tmp_path_factory.mktemp("temporal-can"), {"limit.historyCount.suggestContinueAsNew": "12"}
    )
    yield server
    server.stop()


@pytest.fixture
async def can_env(eager_server: DevServer, tmp_path: Path) -> AsyncIterator[TaskEnv]:
    client: Client = await connect(eager_server.address)
    env = TaskEnv(client=client, config=make_config(tmp_path / "data"), address=eager_server.address)
    async with running_worker(client, env.config):
        yield env


async def test_task_completes_across_continue_as_new(can_env: TaskEnv) -> None:
    """Several runs, one task: approval requested in one run is decided in a later one, the write
    happens once, and the evidence spans all runs."""
    env = can_env
    handle = await env.start(example_spec())
    [request] = (await env.awaiting_approval(handle)).pending
    await handle.signal(
        AgentTaskWorkflow.submit_decision,
        {
            "request_id": request.request_id,
            "version": request.version,
            "decision": "approve",
            "principal": "finance-lead",
        },
    )
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    runs = await run_ids(env.client, handle.id)
    assert len(runs) > 2, "the server should have made the task continue as new several times"
    assert len(result.evidence.inputs) == 3 and len(result.evidence.commands) == 1
    assert [a.request_id for a in result.evidence.approvals] == [request.request_id]
    assert env.business().count() == 1
    assert result.evidence.missing == []
    await assert_replays(env.client, handle.id)  # the last run: it starts from a carried-over state


STALE_DURING_WAIT = 12


async def _waiting_run(env: TaskEnv, task_id: str, within: float = 30.0) -> tuple[str, str, list[str]]:
    """The task's two runs once the second has begun its wait (its deadline's timer started), and
    the second's events by kind."""
    deadline = time.monotonic() + within
    while True:
        runs = await run_ids(env.client, task_id)
        if len(runs) == 2:
            history = await env.client.get_workflow_handle(task_id, run_id=runs[1]).fetch_history()
            kinds = [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]
            if "TIMER_STARTED" in kinds:
                return runs[0], runs[1], kinds
        assert len(runs) <= 2 and time.monotonic() < deadline, runs
        await asyncio.sleep(0.1)


async def test_a_task_that_asks_waits_for_its_approver_in_a_short_run(env: TaskEnv) -> None:
    """With ``continue_as_new_before_wait``, the example continues as new before it waits for the
    approver: the wait's run begins from the carried state and is a few events long (all a replay
    after the cache let the task go reads), the approval sent to the task reaches that run, the
    write happens once, the evidence holds the approval, and both runs replay. Decisions ignored
    during the wait (each a few events) do not make it continue as new again."""
    handle = await env.start({**example_spec(), "continue_as_new_before_wait": MIN_EVENTS_BEFORE_WAIT})
    [request] = (await env.awaiting_approval(handle)).pending
    first, waiting, kinds = await _waiting_run(env, handle.id)
    before = await env.client.get_workflow_handle(handle.id, run_id=first).fetch_history()
    assert len(before.events) > MIN_EVENTS_BEFORE_WAIT
    assert before.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    # Started, one workflow task, the search attributes published again, the deadline's timer.
    assert len(kinds) < MIN_EVENTS_BEFORE_WAIT and kinds[-1] == "TIMER_STARTED", kinds
    # No activity; a marker only for each patch declared after 0.4.0 (each run asks it at its start).
    assert not [k for k in kinds if k.startswith("ACTIVITY")], kinds
    assert kinds.count("MARKER_RECORDED") == len(AFTER_0_4), kinds
    # Stale decisions during the wait grow the run past the limit, and make it continue no further.
    stale = {"request_id": request.request_id, "version": "sha256:stale", "decision": "approve",
             "principal": "finance-lead"}  # fmt: skip
    for _ in range(STALE_DURING_WAIT):
        await handle.signal(AgentTaskWorkflow.submit_decision, stale)
    await env.wait_status(handle, lambda s: s.ignored_count >= STALE_DURING_WAIT)
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert await run_ids(env.client, handle.id) == [first, waiting], "the approved run goes on to the end"
    assert env.business().count() == 1
    assert [a.request_id for a in result.evidence.approvals] == [request.request_id]
    assert result.evidence.missing == []
    await assert_replays(env.client, handle.id, run_id=waiting)
    await assert_replays(env.client, handle.id, run_id=first)  # kept: the continue before the wait


async def test_by_default_a_task_waits_in_a_short_run_and_0_keeps_the_wait_in_its_run(env: TaskEnv) -> None:
    """The example with ``continue_as_new_before_wait`` unset waits for its approver in a short run
    (``short-wait-by-default``): two runs, the second a few events long, the approval reaches it and
    the write happens once. The same spec with 0 waits in the run that led to it: one run. Both
    complete and replay."""
    default = await env.start(example_spec())
    kept = await env.start({**example_spec(), "continue_as_new_before_wait": 0})
    await env.awaiting_approval(default)
    await env.awaiting_approval(kept)
    first, waiting, kinds = await _waiting_run(env, default.id)
    assert len(kinds) < DEFAULT_EVENTS_BEFORE_WAIT and kinds[-1] == "TIMER_STARTED", kinds
    for handle in (default, kept):
        await env.approve(handle)
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        assert result.phase is TaskPhase.COMPLETED and result.evidence.missing == [], result.reason
        assert len(result.evidence.approvals) == 1
    assert await run_ids(env.client, default.id) == [first, waiting]
    assert len(await run_ids(env.client, kept.id)) == 1, "0: the wait stays in its run"
    assert env.business().count() == 2
    await assert_replays(env.client, kept.id, keep=False)
    await assert_replays(env.client, default.id, run_id=first)


def test_continue_as_new_before_wait_refuses_a_limit_a_fresh_run_could_reach_at_once() -> None:
    """Below ``MIN_EVENTS_BEFORE_WAIT`` a run continued before its wait could continue again before
    the same wait; such a spec is refused, naming the field."""
    spec = {**example_spec(), "continue_as_new_before_wait": MIN_EVENTS_BEFORE_WAIT - 1}
    with pytest.raises(InvalidPayload, match="continue_as_new_before_wait"):
        parse_task_input({"spec": spec})
    accepted = parse_task_input({"spec": {**spec, "continue_as_new_before_wait": 40}})
    assert accepted.spec.continue_as_new_before_wait == 40
    off = parse_task_input({"spec": {**spec, "continue_as_new_before_wait": 0}})
    assert off.spec.continue_as_new_before_wait == 0


async def test_older_evidence_moves_to_the_store_and_the_bundle_puts_it_back(
    can_env: TaskEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``inline_evidence`` 2, no run starts with more than 2 command records in its carried state;
    the older ones are in ``evidence-NNNN.json`` parts in the artifact store, and the evidence bundle
    lists all 12 commands, once each and in order, and verifies."""
    env = can_env
    handle = await env.start({"agent": "counter", "prompt": "count to 12", "inline_evidence": 2})
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output and "sum 78" in result.final_output
    evidence = result.evidence
    assert evidence.archived, "older command records should have moved to the artifact store"
    parts = [EvidenceArchive.model_validate_json(env.store().get(ref.digest)) for ref in evidence.archived]
    assert [p.part for p in parts] == list(range(1, len(parts) + 1))
    assert {p.task_id for p in parts} == {handle.id}
    call_ids = [c.call_id for p in parts for c in p.commands] + [c.call_id for c in evidence.commands]
    assert call_ids == [f"call_count_{n}" for n in range(1, 13)]
    assert evidence.missing == [] and result.evidence_complete

    # Every run after the first started from a state holding at most 2 commands.
    archiving_runs = []
    runs = await run_ids(env.client, handle.id)
    assert len(runs) > 3
    for index, run_id in enumerate(runs):
        history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        if index > 0:
            first = history.events[0].workflow_execution_started_event_attributes
            carried = TaskInput.model_validate_json(first.input.payloads[0].data)
            assert carried.state is not None and len(carried.state.commands) <= 2, run_id
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        assert "artifacts.archive" not in scheduled, "every record was stored: archived by digest"
        if "artifacts.archive_stored" in scheduled:
            archiving_runs.append(run_id)
    assert archiving_runs
    archiving_run = archiving_runs[0]
    await assert_replays(env.client, handle.id, run_id=archiving_run)

    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(env.config.data_dir))
    bundle = tmp_path / "bundle"
    code = await asyncio.to_thread(
        cli_main, ["--address", env.address, "evidence", handle.id, "-o", str(bundle)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "commands 12" in out and f"({len(parts)} archived parts back in line)" in out
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [c["call_id"] for c in manifest["evidence"]["commands"]] == [
        f"call_count_{n}" for n in range(1, 13)
    ]
    code = await asyncio.to_thread(cli_main, ["verify", str(bundle)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert sum(line.startswith("ok  archive evidence-") for line in out.splitlines()) == len(parts)


async def test_follow_ups_piling_up_while_a_task_waits_are_capped_so_the_state_stays_carriable(
    can_env: TaskEnv,
) -> None:
    """Follow-up input piling up while a task waits for approval used to make the carried state too
    large for continue-as-new: now what would pass the per-task cap is refused at arrival (named in
    the event), the state stays small, and the task completes once approved."""
    env = can_env
    handle = await env.start(example_spec())
    await env.awaiting_approval(handle)
    for n in range(17):
        await handle.signal(
            AgentTaskWorkflow.add_input, {"text": f"{n} " + "x" * 99_990, "principal": "finance-lead"}
        )
    await env.approve(handle)
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert env.business().count() == 1
    events = list(JsonlEventSink(env.config.events_dir).read(handle.id))
    refused = [e for e in events if e.type.value == "input.ignored"]
    assert len(refused) == 13 and all("400,000" in e.data["reason"] for e in refused)
    for run_id in await run_ids(env.client, handle.id):
        history = await env.client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        first = history.events[0].workflow_execution_started_event_attributes
        assert len(first.input.payloads[0].data) < 600_000
    await assert_replays(env.client, handle.id, keep=False)  # 400 KB of follow-ups: not committed
