"""`agent-worker replay`: a real task's history, fetched from the dev server or read from a file,
replays on the current code and fails loudly on a deliberately non-deterministic change."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.common import RawValue

# This module defines a workflow, so the workflow sandbox imports it again: everything else it
# imports passes through (as in workflows/).
with workflow.unsafe.imports_passed_through():
    import pytest
    from agent_worker.cli.replay import NONDETERMINISTIC, OK, add_parser, cmd_replay, default_workflows
    from agent_worker.cli.tasks import CliError
    from agent_worker.schemas.tasks import TaskPhase, TaskResult
    from agent_worker.workflows import (
        AgentTaskWorkflow,
        FleetDoctorWorkflow,
        SandboxReaperWorkflow,
        ShadowRunWorkflow,
        ShadowTaskWorkflow,
    )
    from temporalio.client import Client, WorkflowHistory

    from agent_worker.client import TASKS_QUERY, WORKFLOW_TYPE
    from tests.helpers.support import TaskEnv, example_spec


@workflow.defn(name=WORKFLOW_TYPE)
class TimerFirstAgentTask(AgentTaskWorkflow):
    """The lifecycle with one change a careless edit could make: a timer before anything else,
    which the recorded histories never scheduled."""

    @workflow.run
    async def run(self, raw: RawValue) -> TaskResult:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(raw)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agent-worker")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["replay", *argv])


async def replay(
    client: Client | None, *argv: str, workflows: list[type] | None = None
) -> tuple[int, list[str]]:
    """Run the command; returns the exit code and the output lines."""

    async def connect() -> Client:
        assert client is not None, "this replay was not meant to reach the cluster"
        return client

    out = io.StringIO()
    code = await cmd_replay(parse(*argv), connect, workflows=workflows, out=out)
    return code, out.getvalue().splitlines()


def run_lines(lines: list[str], history: WorkflowHistory) -> list[list[str]]:
    """The per-run lines about ``history``'s run, split into words."""
    return [ln.split() for ln in lines if ln.split()[2:4] == [history.workflow_id, history.run_id]]


@pytest.fixture
async def completed(env: TaskEnv) -> WorkflowHistory:
    """The monthly-report example run to completion (approved by finance-lead); its history."""
    handle = await env.start(example_spec())
    await env.approve(handle)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    # Visibility is eventually consistent: wait until the list query sees the closed run.
    query = f"WorkflowId = '{handle.id}' AND ExecutionStatus = 'Completed'"
    deadline = time.monotonic() + 30
    while (await env.client.count_workflows(query)).count < 1:
        assert time.monotonic() < deadline, f"visibility never listed {handle.id} as completed"
        await asyncio.sleep(0.2)
    return await handle.fetch_history()


async def test_recent_histories_replay_on_the_current_code(env: TaskEnv, completed: WorkflowHistory) -> None:
    """A completed task listed through visibility (type, task queue, since) replays: an OK line with
    its id, run id and event count for each of its runs (the example waits for its approver in a
    short run: two), a summary, exit code 0."""
    query = f"{TASKS_QUERY} AND TaskQueue = '{env.task_queue}'"
    code, lines = await replay(env.client, "--query", query, "--since", "1h", "--limit", "10")
    assert code == 0, "\n".join(lines)
    assert run_lines(lines, completed) == [
        [
            OK,
            WORKFLOW_TYPE,
            completed.workflow_id,
            completed.run_id,
            str(len(completed.events)),
            "events",
        ]
    ]
    assert "replayed 2 histories: 2 OK" in lines


async def test_a_non_deterministic_change_fails_with_exit_code_1(
    env: TaskEnv, completed: WorkflowHistory
) -> None:
    """The same history against a workflow that schedules a timer first is reported
    NONDETERMINISTIC with the SDK's reason, counted in the summary (both runs of the task), and
    exits 1."""
    code, lines = await replay(
        env.client,
        "--query",
        f"WorkflowId = '{completed.workflow_id}'",
        workflows=[TimerFirstAgentTask, SandboxReaperWorkflow],
    )
    assert code == 1, "\n".join(lines)
    [words] = run_lines(lines, completed)
    assert words[:2] == [NONDETERMINISTIC, WORKFLOW_TYPE]
    assert words[4:6] == [str(len(completed.events)), "events:"]
    assert "nondeterminism error" in " ".join(words[6:]).lower()
    assert f"replayed 2 histories: 0 OK, 2 {NONDETERMINISTIC}" in lines
    assert any("do not replay on this code" in ln for ln in lines)


async def test_history_files_replay_and_fail_the_same_way(completed: WorkflowHistory, tmp_path: Path) -> None:
    """`--dir` reads history JSON files (ids from workflow_ids.json): the current code passes them
    and the altered workflow fails them, without a cluster."""
    histories = tmp_path / "histories"
    histories.mkdir()
    (histories / "approved.json").write_text(completed.to_json())
    (histories / "workflow_ids.json").write_text(json.dumps({"approved": completed.workflow_id}))

    code, lines = await replay(None, "--dir", str(histories))
    assert code == 0, "\n".join(lines)
    assert [words[:2] for words in run_lines(lines, completed)] == [[OK, WORKFLOW_TYPE]]

    code, lines = await replay(None, "--dir", str(histories), workflows=[TimerFirstAgentTask])
    assert code == 1
    assert [words[:2] for words in run_lines(lines, completed)] == [[NONDETERMINISTIC, WORKFLOW_TYPE]]


async def test_usage_errors_exit_2_before_replaying_anything(tmp_path: Path) -> None:
    """A bad --since, a --limit below 1, an empty --query, a missing or empty --dir, or --dir with
    cluster options is a usage error (exit code 2) naming the option."""
    (tmp_path / "empty").mkdir()
    cases = {
        ("--since", "7 days"): "interval '7 days'",
        ("--limit", "0"): "--limit 0",
        ("--query", " "): "--query is empty",
        ("--dir", str(tmp_path / "missing")): "not a directory",
        ("--dir", str(tmp_path / "empty")): "no *.json history files",
        ("--dir", str(tmp_path), "--since", "1d"): "--dir replays files",
    }
    for argv, message in cases.items():
        with pytest.raises(CliError) as raised:
            await replay(None, *argv)
        assert raised.value.code == 2, argv
        assert message in str(raised.value), (argv, str(raised.value))


async def test_an_unparseable_query_is_a_usage_error(client: Client) -> None:
    """A visibility query the server rejects exits 2 with the server's reason."""
    with pytest.raises(CliError) as raised:
        await replay(client, "--query", TASKS_QUERY.replace("=", "= ="))
    assert raised.value.code == 2
    assert "cannot list or fetch histories" in str(raised.value)


def test_the_default_workflows_are_every_workflow_the_workers_run() -> None:
    """Without a choice, histories replay against every workflow in `workflows/`."""
    assert set(default_workflows()) == {
        AgentTaskWorkflow,
        SandboxReaperWorkflow,
        FleetDoctorWorkflow,
        ShadowRunWorkflow,
        ShadowTaskWorkflow,
    }
