"""Long agent runs keep history small: the conversation lives in the artifact store, history holds
digests, and continue-as-new carries the task's state with nothing lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_worker.cli.evidence import expand
from agent_worker.schemas.tasks import INLINE_EVIDENCE, Evidence, TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client

from tests.helpers.support import (
    DevServer,
    TaskEnv,
    connect,
    launch_dev_server,
    make_config,
    run_ids,
    running_worker,
)

TWO_MB = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A server that never suggests continue-as-new on its own: only the task's limit applies."""
    server = launch_dev_server(
        tmp_path_factory.mktemp("temporal-quiet"),
        {
            "limit.historyCount.suggestContinueAsNew": "40000",
            "limit.historySize.suggestContinueAsNew": "40000000",
        },
    )
    yield server
    server.stop()


@pytest.fixture
async def quiet_env(quiet_server: DevServer, tmp_path: Path) -> AsyncIterator[TaskEnv]:
    client: Client = await connect(quiet_server.address)
    env = TaskEnv(
        client=client,
        config=make_config(tmp_path / "data", process_isolation="none", sandbox_unsafe_dev=True),
        address=quiet_server.address,
    )
    async with running_worker(client, env.config):
        yield env


def counting_task(target: int, chunk: int = 0, **extra: Any) -> dict[str, Any]:
    prompt = f"count to {target}" + (f", chunk {chunk}" if chunk else "")
    budgets = {
        "max_turns": target + 5,
        "max_actions": target + 5,
        "max_model_calls": target + 5,
        "max_sandbox_seconds": 3600,
    }
    return {"agent": "counter", "prompt": prompt, "budgets": budgets, **extra}


async def run_sizes(client: Client, task_id: str) -> list[tuple[int, int]]:
    """(events, bytes) of every run of the task, oldest first."""
    sizes = []
    for run_id in await run_ids(client, task_id):
        info = (await client.get_workflow_handle(task_id, run_id=run_id).describe()).raw_description
        sizes.append(
            (info.workflow_execution_info.history_length, info.workflow_execution_info.history_size_bytes)
        )
    return sizes


async def test_100_model_calls_over_200k_tokens_keep_history_under_2mb(env: TaskEnv) -> None:
    """100 tool calls each returning ~8 KB (about 200k tokens of tool output in all) complete, the
    model sees every byte, and every run's history stays under 2 MB."""
    handle = await env.start(counting_task(100, chunk=8000))
    result: TaskResult = await asyncio.wait_for(handle.result(), 600)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output and result.final_output.startswith("counted to 100: sum 5050")
    chars = int(result.final_output.rsplit("read ", 1)[1].split()[0])
    assert chars >= 100 * 8000  # the full outputs reached the model, not the inline previews
    assert result.usage.model_calls == 101
    # The model read ~200k tokens of tool output; re-reading the growing conversation each call costs more.
    assert result.usage.input_tokens > 200_000
    sizes = await run_sizes(env.client, handle.id)
    history = await handle.fetch_history()
    by_type: dict[str, int] = {}
    for event in history.events:
        name = event.WhichOneof("attributes") or "?"
        by_type[name] = by_type.get(name, 0) + event.ByteSize()
    print("\nbytes by event type:", sorted(by_type.items(), key=lambda kv: -kv[1])[:6])
    print(
        f"\nlong conversation: {chars} chars of tool output, {result.usage.input_tokens} input tokens; "
        f"runs (events, bytes): {sizes}"
    )
    assert all(size < TWO_MB for _, size in sizes), sizes


def comparable(evidence: Evidence) -> dict[str, Any]:
    """Evidence without wall-clock facts (timings differ between any two runs)."""
    return {
        "inputs": [a.digest for a in evidence.inputs],
        "artifacts": [a.digest for a in evidence.artifacts],
        "commands": [
            (
                c.call_id,
                c.argv,
                c.exit_code,
                c.stdout_artifact.digest,
                c.tool_output.digest if c.tool_output else None,
            )
            for c in evidence.commands
        ],
        "writes": [(w.operation_key, w.receipt.payload_digest, w.confirmed) for w in evidence.writes],
        "missing": evidence.missing,
    }


async def test_500_turns_across_continue_as_new_match_a_run_without(quiet_env: TaskEnv) -> None:
    """A 500-turn task spans at least three runs and ends with the same output and evidence as the
    same task run in one run."""
    env = quiet_env
    plain, split = await asyncio.gather(
        env.start(counting_task(500), task_id="count-plain"),
        env.start(counting_task(500, continue_as_new_after_events=1500), task_id="count-split"),
    )
    plain_result, split_result = await asyncio.wait_for(asyncio.gather(plain.result(), split.result()), 900)
    assert plain_result.phase is TaskPhase.COMPLETED and split_result.phase is TaskPhase.COMPLETED
    plain_runs, split_runs = await run_sizes(env.client, plain.id), await run_sizes(env.client, split.id)
    print(f"\n500 turns: one run {plain_runs}; with continue-as-new {split_runs}")
    assert len(plain_runs) == 1 and len(split_runs) >= 3
    assert split_result.usage.runs == len(split_runs)
    assert (
        split_result.final_output
        == plain_result.final_output
        == "counted to 500: sum 125250, read 1892 characters of tool output"
    )
    # The split task moved its older command records to the artifact store at each continue-as-new,
    # and both keep only the newest inline in their results (patch ``lean-evidence``).
    for result in (split_result, plain_result):
        assert result.evidence.archived and len(result.evidence.commands) == INLINE_EVIDENCE
    split_evidence, unread = expand(split_result.evidence, env.store())
    plain_evidence, plain_unread = expand(plain_result.evidence, env.store())
    assert unread == plain_unread == []
    assert comparable(split_evidence) == comparable(plain_evidence)
    assert len(split_evidence.commands) == 500


async def test_resuming_the_run_state_and_rebasing_on_the_conversation_agree(config_env: TaskEnv) -> None:
    """The same task through RunState resumption only and through conversation rebasing only gives
    the same answer and the same command records: the model saw the same thing either way."""
    env = config_env
    results = []
    for name, limit in (("resume", 10_000), ("rebase", 0)):
        config = env.config.model_copy(
            update={
                "rebase_after_items": limit,
                "run_state": "always" if name == "resume" else "when_needed",
                "task_queue": f"{env.task_queue}-{name}",
            }
        )
        async with running_worker(env.client, config):
            handle = await env.client.start_workflow(
                AgentTaskWorkflow.run,
                counting_task(12, chunk=50),
                id=f"agree-{name}",
                task_queue=config.task_queue,
                result_type=TaskResult,
            )
            results.append(await asyncio.wait_for(handle.result(), 120))
    resumed, rebased = results
    assert resumed.phase is rebased.phase is TaskPhase.COMPLETED
    assert (
        resumed.final_output
        == rebased.final_output
        == "counted to 12: sum 78, read 639 characters of tool output"
    )
    assert comparable(resumed.evidence) == comparable(rebased.evidence)
