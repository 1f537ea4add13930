"""Forks (issue 41, item 1): a new task that begins with another task's state at one of its steps,
never repeats a business write the original committed (answered from the original's receipt, checked
against a real PostgreSQL business store), needs a fresh approval under its own key for a write of
its own, and rebuilds the original's sandbox state in a fresh sandbox by running the original's
earlier commands again. Real dev server, real worker, real process-tier sandboxes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from agent_worker.activities.task_history import read_history
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox.auth import Authenticator
from agent_worker.schemas.events import EventType
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client, WorkflowFailureError

from agent_worker.client import AgentWorkerClient
from tests.helpers.business_backends import open_backend
from tests.helpers.fork_agents import MAKE
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.support import (
    TEST_AGENTS,
    DevServer,
    TaskEnv,
    assert_replays,
    make_config,
    run_cli,
    run_ids,
    running_worker,
)

REPO = Path(__file__).resolve().parent.parent
FORK_AGENTS = [*TEST_AGENTS, "tests.helpers.fork_agents:registrations"]
POLICY = {"default_approvers": ["finance-lead"]}
# A bound on waiting for a task's result, so a fork that waits for an approval fails the test.
RESULT_WITHIN = 120


async def test_a_fork_before_the_write_reuses_the_parents_receipt_and_postgres_keeps_one_row(
    client: Client,
    dev_server: DevServer,
    tmp_path: Path,
    postgres: PostgresServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A task wrote once (approved) and then failed its final step; its fork at the step before the
    write, with an edited prompt, proposes the same write, which is answered from the original's
    receipt without an approval: the fork completes, PostgreSQL holds exactly one row, and the fork's
    evidence names its parent and the receipt it reused; `agent-worker events` shows the tree from
    either side and `agent-worker steps` the original's steps."""
    with open_backend("postgres", tmp_path / "data", postgres) as backend:
        config = make_config(tmp_path / "data", agents=FORK_AGENTS, **backend.settings)
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        workers = AgentWorkerClient(client, config.task_queue)
        async with running_worker(client, config):
            parent = await env.start(
                {"agent": "ledger", "prompt": "record: v-41 then fail", "policy": POLICY}
            )
            await env.approve(parent)
            with pytest.raises(WorkflowFailureError):
                await parent.result()
            assert backend.store.count() == 1
            steps = await workers.steps(parent.id)
            assert [s.step for s in steps] == [1, 2]
            [written] = steps[0].writes
            parent_key = written.split()[0]
            ref = await workers.fork(parent.id, at=1, prompt_edit="record: v-41")
            fork = workers.handle(ref.task_id)
            result: TaskResult = await asyncio.wait_for(fork.result(), RESULT_WITHIN)
            status = await fork.query(AgentTaskWorkflow.status)
            await assert_replays(client, ref.task_id)
            cli = ("--address", dev_server.address)
            code, fork_events, _ = await run_cli(capsys, *cli, "events", ref.task_id)
            assert code == 0, fork_events
            code, parent_events, _ = await run_cli(capsys, *cli, "events", parent.id)
            assert code == 0, parent_events
            code, listed, _ = await run_cli(capsys, *cli, "steps", parent.id)
            assert code == 0, listed
        assert result.phase is TaskPhase.COMPLETED, result.reason
        assert backend.store.count() == 1 and backend.store.count(parent_key) == 1
        [write] = result.evidence.writes
        assert write.reused_from == parent.id and write.operation_key == parent_key
        assert write.confirmed is True  # looked up at completion under the parent's key
        assert result.final_output == f"recorded as {write.receipt.record_id}"
        origin = result.evidence.forked_from
        assert origin is not None and origin.parent == parent.id and origin.at == 1
        assert origin.reused_receipts == [parent_key]
        assert result.evidence.approvals == []  # nothing was written, so nothing was asked
        assert status.forked_from is not None and status.forked_from.parent == parent.id
        types = [e.type for e in status.last_events]
        assert EventType.FORK_STARTED in types and EventType.WRITE_REUSED in types
        assert f"└─ {ref.task_id} (fork at step 1)  <- this task" in fork_events
        assert f"  {parent.id}\n" in fork_events and "write.reused" in fork_events
        assert f"  {parent.id}  <- this task" in parent_events
        assert f"└─ {ref.task_id} (fork at step 1)" in parent_events
        assert f"wrote: {parent_key} committed" in listed and "record_value (call_record)" in listed


async def test_a_forks_own_different_write_needs_a_fresh_approval_under_its_own_key(
    client: Client, dev_server: DevServer, tmp_path: Path, postgres: PostgresServer
) -> None:
    """A fork whose edited prompt makes a different write waits for its own approval and writes under
    its own operation key: the original's row stays, the fork's is the second."""
    with open_backend("postgres", tmp_path / "data", postgres) as backend:
        config = make_config(tmp_path / "data", agents=FORK_AGENTS, **backend.settings)
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        workers = AgentWorkerClient(client, config.task_queue)
        async with running_worker(client, config):
            parent = await env.start({"agent": "ledger", "prompt": "record: v-1", "policy": POLICY})
            await env.approve(parent)
            first = await parent.result()
            ref = await workers.fork(parent.id, at=1, prompt_edit="record: v-2")
            fork = workers.handle(ref.task_id)
            await env.approve(fork)
            result = await asyncio.wait_for(fork.result(), RESULT_WITHIN)
        [parent_write] = first.evidence.writes
        [write] = result.evidence.writes
        assert result.phase is TaskPhase.COMPLETED, result.reason
        assert write.reused_from is None and write.operation_key != parent_write.operation_key
        assert [a.principal for a in result.evidence.approvals] == ["finance-lead"]
        assert backend.store.count() == 2 and backend.store.payload(write.operation_key) == {"value": "v-2"}


async def test_a_fork_before_a_command_rebuilds_the_sandbox_in_a_fresh_one(
    client: Client, dev_server: DevServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Forked at step 2 (`agent-worker fork --at 2`, before the command that reads the file step 1's
    command wrote), the fork runs step 1's command again in its own fresh sandbox, so the file is
    there for its step 2; every command of the fork ran in the fork's sandbox, none in the
    original's, and the original's history still holds its two commands only. A second fork with
    `--replay-until 3` answers its step 2 from the original's recorded turn, not the model; a third,
    `--agent-version shell` at step 3, is answered by that agent from the original's conversation."""
    config = make_config(tmp_path / "data", agents=FORK_AGENTS)
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    workers = AgentWorkerClient(client, config.task_queue)
    async with running_worker(client, config):
        parent = await env.start({"agent": "builder", "prompt": "build it"})
        first = await parent.result()
        assert first.final_output == "file says: built-at-step-1"
        code, out, err = await run_cli(
            capsys, "--address", dev_server.address, "fork", parent.id, "--at", "2", "--json"
        )
        assert code == 0, err
        fork_id = json.loads(out)["task_id"]
        result = await asyncio.wait_for(workers.handle(fork_id).result(), RESULT_WITHIN)
        await assert_replays(client, fork_id)
        replaying = await workers.fork(parent.id, at=2, replay_until=3)
        replayed_run = await asyncio.wait_for(workers.handle(replaying.task_id).result(), RESULT_WITHIN)
        handed = await workers.fork(parent.id, at=3, agent_version="shell")
        other_agent = await asyncio.wait_for(workers.handle(handed.task_id).result(), RESULT_WITHIN)
        parent_history = await read_history(client, parent.id)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "file says: built-at-step-1"
    replayed, checked = result.evidence.commands
    assert replayed.call_id == "replay-call_make" and replayed.argv == ["sh", "-c", MAKE]
    assert checked.call_id == "call_check"
    parent_sandboxes = {c.sandbox_id for c in first.evidence.commands}
    assert replayed.sandbox_id == checked.sandbox_id and replayed.sandbox_id not in parent_sandboxes
    assert [c["call_id"] for _, c in parent_history.commands] == ["call_make", "call_check"]
    origin = result.evidence.forked_from
    assert origin is not None and origin.at == 2 and origin.replayed_commands == 1
    assert result.usage.turns == 3  # the original's first turn counts: what it spent carries over
    assert result.usage.replayed_model_calls == 0
    assert replayed_run.phase is TaskPhase.COMPLETED, replayed_run.reason
    assert replayed_run.final_output == "file says: built-at-step-1"
    assert replayed_run.usage.replayed_model_calls == 1  # step 2, from the original's turn
    # `--agent-version`: another registered agent takes over at step 3, from the same conversation.
    assert other_agent.phase is TaskPhase.COMPLETED and other_agent.final_output is not None
    assert (
        other_agent.final_output.startswith("shell said:") and "built-at-step-1" in other_agent.final_output
    )


async def test_the_api_lists_steps_and_forks_for_a_caller_who_may_see_the_task(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """`GET /v1/tasks/{id}/steps` lists the original's steps and `POST /v1/tasks/{id}/fork` starts a
    fork that completes, for a caller the task's policy names; anyone else gets 404, and nothing starts."""
    config = make_config(tmp_path / "data", agents=FORK_AGENTS)
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    auth = Authenticator(
        "token", {"lead-token-1234567890": "finance-lead", "other-token-1234567890": "mallory"}
    )
    app = build_api(client, ApiConfig(auth=auth, task_queue=config.task_queue))
    lead, other = (
        {"Authorization": f"Bearer {t}"} for t in ("lead-token-1234567890", "other-token-1234567890")
    )
    async with (
        running_worker(client, config),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api", timeout=60) as api,
    ):
        parent = await env.start({"agent": "builder", "prompt": "build it", "policy": POLICY})
        await asyncio.wait_for(parent.result(), RESULT_WITHIN)
        assert (await api.get(f"/v1/tasks/{parent.id}/steps", headers=other)).status_code == 404
        assert (
            await api.post(f"/v1/tasks/{parent.id}/fork", json={"at": 2}, headers=other)
        ).status_code == 404
        listed = await api.get(f"/v1/tasks/{parent.id}/steps", headers=lead)
        assert listed.status_code == 200, listed.text
        assert [s["step"] for s in listed.json()] == [1, 2, 3]
        assert listed.json()[0]["commands"] == [f"sh -c {MAKE}"]
        started = await api.post(f"/v1/tasks/{parent.id}/fork", json={"at": 2}, headers=lead)
        assert started.status_code == 201, started.text
        fork_id = started.json()["task_id"]
        result = await asyncio.wait_for(AgentWorkerClient(client).handle(fork_id).result(), RESULT_WITHIN)
        refused = await api.post(f"/v1/tasks/{parent.id}/fork", json={"at": 9}, headers=lead)
    assert result.phase is TaskPhase.COMPLETED and result.final_output == "file says: built-at-step-1"
    assert refused.status_code == 422 and "no step 9" in refused.text


DOC_BLOCK = re.compile(r"^```python fork-example\n(.*?)^```$", re.MULTILINE | re.DOTALL)


async def test_the_docs_fork_example_runs_as_written(env: TaskEnv, tmp_path: Path) -> None:
    """docs/forks.md's example, run as written in its own process: the monthly report is filed once,
    its fork at step 2 with a reworded prompt completes on the original's receipt, and the business
    store holds one record."""
    [block] = DOC_BLOCK.findall((REPO / "docs" / "forks.md").read_text())
    script = tmp_path / "fork_example.py"
    script.write_text(block)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script)],
        env={**os.environ, "TEMPORAL_ADDRESS": env.address, "AGENT_WORKER_TASK_QUEUE": env.task_queue},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 5, done.stdout
    assert lines[-2:] == ["completed True", "True"]
    assert env.business().count() == 1


async def test_a_write_the_parent_found_by_lookup_after_a_lost_answer_is_not_written_again(
    client: Client,
    dev_server: DevServer,
    tmp_path: Path,
    postgres: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The original's write committed but its answer was lost, so its receipt came from the lookup
    that followed; the fork's same write is still answered from that receipt: PostgreSQL keeps one row."""
    monkeypatch.setenv("AW_FAULTS", "lost")
    monkeypatch.setenv("AW_FAULT_DIR", str(tmp_path / "fault-marks"))
    with open_backend("postgres", tmp_path / "data", postgres) as backend:
        config = make_config(
            tmp_path / "data",
            agents=FORK_AGENTS,
            business_writer="tests.helpers.faults:faulty_writer",
            **backend.settings,
        )
        env = TaskEnv(client=client, config=config, address=dev_server.address)
        workers = AgentWorkerClient(client, config.task_queue)
        allow = {"rules": [{"tool": "record_value", "decision": "allow"}]}
        async with running_worker(client, config):
            parent = await env.start({"agent": "recorder", "prompt": "record: lost-41", "policy": allow})
            first = await asyncio.wait_for(parent.result(), RESULT_WITHIN)
            ref = await workers.fork(parent.id, at=1)
            result = await asyncio.wait_for(workers.handle(ref.task_id).result(), RESULT_WITHIN)
    [parent_write] = first.evidence.writes
    assert parent_write.confirmed_by == "lookup"  # the fault really lost the write's answer
    [write] = result.evidence.writes
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert write.reused_from == parent.id and write.operation_key == parent_write.operation_key
    assert backend.store.count() == 1


async def test_a_fork_reads_every_run_of_a_parent_that_continued_as_new(env: TaskEnv) -> None:
    """The original continued as new several times; its steps are numbered across its runs, and a
    fork at step 7 reruns its six earlier commands in a fresh sandbox and finishes the count as the
    original did."""
    spec = {"agent": "counter", "prompt": "count to 8", "continue_as_new_after_events": 50}
    parent = await env.start(spec)
    first = await asyncio.wait_for(parent.result(), RESULT_WITHIN)
    assert len(await run_ids(env.client, parent.id)) > 1  # it did continue as new
    workers = AgentWorkerClient(env.client, env.task_queue)
    assert [s.step for s in await workers.steps(parent.id)] == list(range(1, 10))
    ref = await workers.fork(parent.id, at=7)
    result = await asyncio.wait_for(workers.handle(ref.task_id).result(), RESULT_WITHIN)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == first.final_output and "sum 36" in (result.final_output or "")
    origin = result.evidence.forked_from
    assert origin is not None and origin.replayed_commands == 6


@pytest.fixture
async def fork_env(config_env: TaskEnv) -> AsyncIterator[TaskEnv]:
    """A task env whose in-process worker also serves the fork tests' agents."""
    env = TaskEnv(
        client=config_env.client,
        config=make_config(config_env.config.data_dir, agents=FORK_AGENTS),
        address=config_env.address,
    )
    async with running_worker(env.client, env.config):
        yield env


async def test_a_prompt_edit_at_a_later_step_replaces_the_prompt_in_a_copy_of_the_conversation(
    fork_env: TaskEnv,
) -> None:
    """Forked at step 2 with an edited prompt, the fork's first turn starts from a copy of the
    original's conversation whose first user message is the new prompt; the original's is unchanged."""
    env = fork_env
    workers = AgentWorkerClient(env.client, env.task_queue)
    parent = await env.start({"agent": "builder", "prompt": "build it"})
    await asyncio.wait_for(parent.result(), RESULT_WITHIN)
    ref = await workers.fork(parent.id, at=2, prompt_edit="build it again, differently")
    result = await asyncio.wait_for(workers.handle(ref.task_id).result(), RESULT_WITHIN)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    store = env.store()
    forked = (await read_history(env.client, ref.task_id)).turns[2].input["conversation_ref"]
    original = (await read_history(env.client, parent.id)).turns[2].input["conversation_ref"]
    assert forked != original
    assert store.get_json(forked)[0]["content"] == "build it again, differently"
    assert store.get_json(original)[0]["content"] == "build it"
