"""Starting is idempotent by task id, and malformed input is refused clearly: by the CLI before
anything starts, and by the workflow (raw from `temporal workflow start`) as one non-retryable
failure, never a workflow task retrying forever."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest
from agent_worker.cli.devserver import temporal_binary
from agent_worker.cli.main import main as cli_main
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from agent_worker.client import WORKFLOW_TYPE
from tests.helpers.support import TaskEnv, event_types, example_spec


async def test_starting_the_same_task_id_twice_gives_one_task(
    env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's second `start --id X` starts nothing and says so; visibility holds one execution."""
    args = [
        "--address",
        env.address,
        "start",
        "--example",
        "monthly-report",
        "--id",
        "dup-task",
        "--task-queue",
        env.task_queue,
    ]
    assert await asyncio.to_thread(cli_main, args) == 0
    assert await asyncio.to_thread(cli_main, args) == 0
    out = capsys.readouterr().out
    assert "started task dup-task" in out and "already exists; not started again" in out
    # A client that ignores the CLI and starts directly is refused too.
    with pytest.raises(Exception, match="already started|AlreadyStarted"):
        await env.start(example_spec(), task_id="dup-task")
    executions = [e async for e in env.client.list_workflows("WorkflowId = 'dup-task'")]
    assert len(executions) == 1
    await env.cancel(env.client.get_workflow_handle("dup-task"))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda s: s.pop("agent"), "agent: Field required"),
        (lambda s: s["budgets"].update(max_turns=0), "budgets.max_turns"),
        (lambda s: s["inputs"][0].update(name="../etc/passwd"), "inputs.0.name"),
        (lambda s: s.update(surprise=1), "surprise: Extra inputs are not permitted"),
    ],
)
async def test_cli_refuses_a_malformed_spec_naming_the_field(
    env: TaskEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate, field: str
) -> None:
    """A malformed TaskSpec file is refused by `agent-worker start` (exit 2) with the field named,
    and no task is started."""
    spec = example_spec()
    mutate(spec)
    path = tmp_path / "task.json"
    path.write_text(json.dumps(spec))
    code = await asyncio.to_thread(
        cli_main,
        ["--address", env.address, "start", str(path), "--id", "bad-cli", "--task-queue", env.task_queue],
    )
    assert code == 2
    assert field in capsys.readouterr().err
    assert (await env.client.count_workflows("WorkflowId = 'bad-cli'")).count == 0


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ('{"agent": "monthly-report"}', "spec.prompt: Field required"),
        (
            '{"agent": "monthly-report", "prompt": "x", "budgets": {"max_turns": "many"}}',
            "spec.budgets.max_turns",
        ),
        ('"just a string"', "must be a JSON object"),
    ],
)
async def test_raw_malformed_input_fails_the_workflow_once(env: TaskEnv, raw: str, words: str) -> None:
    """The same bad input sent raw with `temporal workflow start` ends that workflow quickly with a
    non-retryable InvalidTaskInput failure naming the field, and no workflow task ever fails."""
    task_id = f"raw-bad-{abs(hash(raw)) % 10**8}"
    await asyncio.to_thread(
        subprocess.run,
        [
            temporal_binary(),
            "workflow",
            "start",
            "--address",
            env.address,
            "--type",
            WORKFLOW_TYPE,
            "--task-queue",
            env.task_queue,
            "--workflow-id",
            task_id,
            "--input",
            raw,
        ],  # fmt: skip
        check=True,
        capture_output=True,
        timeout=30,
    )
    handle = env.client.get_workflow_handle(task_id)
    started = time.monotonic()
    with pytest.raises(WorkflowFailureError) as caught:
        await asyncio.wait_for(handle.result(), 30)
    assert time.monotonic() - started < 15
    cause = caught.value.cause
    assert getattr(cause, "type", None) == "InvalidTaskInput"
    assert getattr(cause, "non_retryable", False) is True
    assert words in str(cause)
    assert (await handle.describe()).status is WorkflowExecutionStatus.FAILED
    history = (await handle.fetch_history()).to_json()
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in event_types(history)
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_FAILED" in event_types(history)
