"""Forks on another model (`agent-worker fork --model`) and from an exported history file
(`agent-worker fork --history FILE`, issue 41 items 1 and 3): the fork's turns call the model it
names, through the worker's provider, while the original's did not; a fork read from a committed
history (no cluster copy of the original) completes and never writes again what the file's task
wrote. Real dev server, real worker, a real HTTP model server on loopback, real business store."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from agent_worker.schemas.tasks import TaskPhase
from agent_worker.schemas.writes import WriteInput
from temporalio.client import Client

from agent_worker.client import AgentWorkerClient
from tests.helpers.histories import chain_files
from tests.helpers.openai_stub import OpenAIStub, response_json
from tests.helpers.support import (
    TEST_AGENTS,
    DevServer,
    TaskEnv,
    assert_replays,
    make_config,
    run_cli,
    running_worker,
)

HISTORIES = Path(__file__).resolve().parent / "histories"
# The monthly report, approved and filed once (a sandbox command, then the write): its newest run,
# and every run of it (it waited for its approver in a run of its own).
REPORT_HISTORY = HISTORIES / "test_approval_by_temporal_cli_completes_with_evidence.json"
REPORT_RUNS = chain_files(REPORT_HISTORY)
# A fork of a ledger task whose write was answered from its parent's receipt: its history holds no
# business.write, only the receipt fork.prepare took from the parent.
FORK_HISTORY = (
    HISTORIES / "test_a_fork_before_the_write_reuses_the_parents_receipt_and_postgres_keeps_one_row.json"
)
FORK_AGENTS = [*TEST_AGENTS, "tests.helpers.fork_agents:registrations"]
RESULT_WITHIN = 120


def _call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def two_steps(_path: str, body: Any) -> dict[str, Any]:
    """Step 1 runs a command (run_shell); step 2 answers, naming the model that answered."""
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    model = str(body.get("model"))
    if not any(i.get("type") == "function_call_output" for i in items):
        answer = response_json("unused", model=model)
        answer["output"] = [_call("run_shell", {"script": "echo made > made.txt"}, "call_make")]
        return answer
    return response_json(f"done by {model}", model=model)


async def test_a_fork_with_model_runs_its_turns_on_that_model_and_the_original_did_not(
    client: Client,
    dev_server: DevServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The original ran both its steps on the worker's model (`gpt-test`); `agent-worker fork --at 2
    --model gpt-fork` starts a fork whose turn calls `gpt-fork` through the same provider (every
    request after the fork started names it), and the fork's usage records that model; a fork over the
    client with another model string is refused by no one and runs on its model too."""
    with OpenAIStub() as stub:
        stub.answer_with(two_steps)
        config = make_config(tmp_path / "data", **stub.settings())
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(config.data_dir))
        monkeypatch.setenv("AGENT_WORKER_TASK_QUEUE", config.task_queue)
        workers = AgentWorkerClient(client, config.task_queue)
        async with running_worker(client, config):
            parent = await env.start({"agent": "shell", "prompt": "make it"})
            first = await asyncio.wait_for(parent.result(), RESULT_WITHIN)
            original_requests = len(stub.requests)
            code, out, err = await run_cli(
                capsys, "--address", dev_server.address, "fork", parent.id, "--at", "2",
                "--model", "gpt-fork", "--json",
            )  # fmt: skip
            assert code == 0, err
            fork_id = json.loads(out)["task_id"]
            forked = await asyncio.wait_for(workers.handle(fork_id).result(), RESULT_WITHIN)
            await assert_replays(client, fork_id)
            fork_requests = len(stub.requests)
            ref = await workers.fork(parent.id, at=1, model="gpt-other")
            other = await asyncio.wait_for(workers.handle(ref.task_id).result(), RESULT_WITHIN)
        models = [r.body["model"] for r in stub.requests]
    assert first.phase is TaskPhase.COMPLETED and first.final_output == "done by gpt-test"
    assert models[:original_requests] == ["gpt-test", "gpt-test"]
    assert models[original_requests:fork_requests] == ["gpt-fork"]  # step 2 only: step 1 was the original's
    assert forked.phase is TaskPhase.COMPLETED, forked.reason
    assert forked.final_output == "done by gpt-fork" and "gpt-fork" in (forked.usage.model or "")
    assert forked.evidence.forked_from is not None and forked.evidence.forked_from.at == 2
    assert models[fork_requests:] == ["gpt-other", "gpt-other"]  # forked at step 1: both its steps
    assert other.phase is TaskPhase.COMPLETED and other.final_output == "done by gpt-other"


def _history_events(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["events"]


def _writes_in(path: Path) -> list[WriteInput]:
    """The business writes a history file's task sent (their inputs, decoded)."""
    found = []
    for event in _history_events(path):
        attrs = event.get("activityTaskScheduledEventAttributes")
        if attrs and attrs["activityType"]["name"] == "business.write":
            [payload] = attrs["input"]["payloads"]
            found.append(WriteInput.model_validate_json(base64.b64decode(payload["data"])))
    return found


@pytest.fixture
async def history_env(
    client: Client, dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """A worker serving the fork agents, and the CLI configured for its queue and stores."""
    config = make_config(tmp_path / "data", agents=FORK_AGENTS)
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(config.data_dir))
    monkeypatch.setenv("AGENT_WORKER_TASK_QUEUE", config.task_queue)
    async with running_worker(client, config):
        yield TaskEnv(client=client, config=config, address=dev_server.address)


async def test_a_fork_from_a_committed_history_file_completes_without_writing_again(
    history_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """The monthly report's committed history (never run on this cluster) is forked at step 1 from
    the file: `agent-worker steps --history` lists its steps, the fork runs live, proposes the report
    the file's task filed and is answered from the file's receipt, with no approval asked: the
    business system, which holds that one report, still holds one, confirmed by lookup."""
    env = history_env
    [filed] = _writes_in(REPORT_HISTORY)
    business = env.business()
    business.write(filed)  # the business system the file's task wrote to
    cli = ("--address", env.address)
    files = [arg for run in REPORT_RUNS[::-1] for arg in ("--history", str(run))]  # any order
    assert len(REPORT_RUNS) == 2, "the example waits for its approver in a run of its own"
    code, listed, err = await run_cli(capsys, *cli, "steps", *files)
    assert code == 0, err
    code, out, err = await run_cli(capsys, *cli, "fork", "report-oct", *files, "--at", "1", "--json")
    assert code == 0, err
    fork_id = json.loads(out)["task_id"]
    result = await asyncio.wait_for(AgentWorkerClient(env.client).handle(fork_id).result(), RESULT_WITHIN)
    assert f"wrote: {filed.operation_key} committed" in listed and "submit_report" in listed
    assert fork_id.startswith("report-oct.fork-")
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [write] = result.evidence.writes
    assert write.reused_from == "report-oct" and write.operation_key == filed.operation_key
    assert write.confirmed is True
    assert result.evidence.approvals == []
    assert business.count() == 1


async def test_a_fork_of_a_fork_from_its_history_file_does_not_repeat_the_grandparents_write(
    history_env: TaskEnv,
) -> None:
    """A committed fork history holds no write of its own (its write was its parent's receipt, taken
    by fork.prepare); forked again from that file over the client, the same write is answered from
    that receipt: the fork completes without asking for the approval the policy wants for a new write,
    and the business store gains no row."""
    env = history_env
    workers = AgentWorkerClient(env.client, env.task_queue)
    assert _writes_in(FORK_HISTORY) == []
    ref = await workers.fork("ledger-fork", at=1, history=FORK_HISTORY, store=env.store())
    result = await asyncio.wait_for(workers.handle(ref.task_id).result(), RESULT_WITHIN)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    [write] = result.evidence.writes
    assert write.reused_from == "ledger-fork" and result.evidence.approvals == []
    assert env.business().count() == 0


async def test_a_fork_from_a_file_at_a_step_whose_conversation_is_elsewhere_is_refused_by_name(
    history_env: TaskEnv,
) -> None:
    """Forked at step 2 from a history exported elsewhere (its conversation's digest is not in this
    artifact store), the fork fails at once naming the missing conversation, instead of a turn failing
    later."""
    from temporalio.client import WorkflowFailureError

    env = history_env
    workers = AgentWorkerClient(env.client, env.task_queue)
    ref = await workers.fork("report-oct", at=2, history=REPORT_RUNS, store=env.store())
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(workers.handle(ref.task_id).result(), RESULT_WITHIN)
    assert "not in this artifact store" in str(failed.value.cause)
    assert env.business().count() == 0


async def test_the_newest_run_alone_refuses_a_step_of_an_earlier_run_saying_so(
    history_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given only the newest run of a task that waited in a run of its own (what `temporal workflow
    show` exports without --run-id), `steps` lists the steps it holds and `fork` at an earlier step
    is refused, saying the earlier runs are missing and how to export them; runs of two different
    tasks are refused as not one chain. Nothing starts."""
    env = history_env
    cli = ("--address", env.address)
    code, listed, err = await run_cli(capsys, *cli, "steps", "--history", str(REPORT_HISTORY), "--json")
    assert code == 0, err
    steps = [json.loads(line)["step"] for line in listed.splitlines()]
    assert steps and 1 not in steps, steps
    code, _, err = await run_cli(capsys, *cli, "fork", "--history", str(REPORT_HISTORY), "--at", "1")
    assert code != 0 and "step 1 is not among them" in err and "--run-id" in err, err
    code, _, err = await run_cli(
        capsys, *cli, "fork", "--history", str(REPORT_HISTORY), "--history", str(FORK_HISTORY), "--at", "1"
    )
    assert code != 0 and "not of one task" in err, err
    assert [e async for e in env.client.list_workflows(f"TaskQueue = '{env.task_queue}'")] == []


async def test_a_file_that_is_no_exported_history_is_refused_naming_it(
    history_env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fork --history` and `steps --history` on a file that is not a Temporal history exit with an
    error naming the file, and start nothing; `fork` with neither a task nor a file is a usage error."""
    bogus = tmp_path / "notes.json"
    bogus.write_text('{"events": []}')
    cli = ("--address", history_env.address)
    code, _, err = await run_cli(capsys, *cli, "fork", "--history", str(bogus), "--at", "1")
    assert code != 0 and "exported" in err and "history" in err
    missing = tmp_path / "missing.json"
    code, _, err = await run_cli(capsys, *cli, "steps", "--history", str(missing))
    assert code != 0 and str(missing) in err
    code, _, err = await run_cli(capsys, *cli, "fork", "--at", "1")
    assert code == 2 and "--history" in err
