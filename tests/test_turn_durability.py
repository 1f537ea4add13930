"""Agent turns are durable at the granularity of one model call, take follow-up input, and stop at
their budgets."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from pathlib import Path

from agent_worker.activities.sandbox import sandbox_id_for
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from tests.helpers.agents import CALL_LOG_ENV
from tests.helpers.support import TaskEnv, assert_replays, spawn_worker


async def test_sigkill_mid_turn_repeats_at_most_the_call_in_flight(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """A worker killed while a turn is making its model calls: the next worker answers the completed
    calls from the journal, so the model's call log shows at most one call made twice."""
    env = config_env
    call_log = tmp_path / "calls.log"
    first = spawn_worker(env, tmp_path / "worker-1.log", **{CALL_LOG_ENV: str(call_log)})
    try:
        handle = await env.start({"agent": "notes", "prompt": "take your notes"})
        deadline = time.monotonic() + 60
        while not call_log.exists() or len(call_log.read_text().split()) < 3:
            assert time.monotonic() < deadline, "the turn never got going"
            await asyncio.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
    finally:
        if first.poll() is None:
            first.kill()
    calls_before_kill = len(call_log.read_text().split())
    second = spawn_worker(env, tmp_path / "worker-2.log", **{CALL_LOG_ENV: str(call_log)})
    try:
        result: TaskResult = await asyncio.wait_for(handle.result(), 120)
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
    assert result.phase is TaskPhase.COMPLETED
    assert result.final_output == "took 6 notes"
    calls = Counter(call_log.read_text().split())
    assert sorted(calls) == [str(i) for i in range(7)], calls
    repeated = sum(n - 1 for n in calls.values())
    print(
        f"\nmodel calls before the kill: {calls_before_kill}; calls made twice: {repeated}; "
        f"log: {dict(calls)}"
    )
    assert repeated <= 1
    assert result.usage.replayed_model_calls >= calls_before_kill - 1


async def test_follow_up_input_reaches_the_next_turn(env: TaskEnv) -> None:
    """Input added with the `add_input` signal while a command runs is seen by the agent's next
    turn; input that is not valid is recorded as ignored."""
    handle = await env.start({"agent": "shell", "prompt": "run: touch started && sleep 2 && echo done"})
    started = (
        env.config.sandbox_root
        / sandbox_id_for(handle.id, handle.first_execution_run_id)
        / "work"
        / "started"
    )
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    await handle.signal(AgentTaskWorkflow.add_input, {"text": "also say banana", "principal": "ops"})
    await handle.signal(AgentTaskWorkflow.add_input, {"txt": "typo"})
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.COMPLETED
    assert result.final_output and "you added: also say banana" in result.final_output
    status = await env.wait_status(handle, lambda s: True)
    kinds = {e.type.value: e.data for e in status.last_events}
    assert kinds["input.added"]["principal"] == "ops"
    assert "text: Field required" in kinds["input.ignored"]["reason"]
    await assert_replays(env.client, handle.id)


async def test_model_call_budget_hands_off_with_the_reason(env: TaskEnv) -> None:
    """A task that reaches its model-call budget ends handed_off, saying which budget and by how much."""
    spec = {"agent": "counter", "prompt": "count to 5", "budgets": {"max_model_calls": 3}}
    handle = await env.start(spec)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason == "max_model_calls budget exhausted (used 3 of 3)"
    assert len(result.evidence.commands) == 2  # the third proposal was not run
    await assert_replays(env.client, handle.id)


async def test_token_budget_hands_off(env: TaskEnv) -> None:
    """Tokens from the SDK's usage count against max_tokens: the task stops before a turn that may
    pass the limit (one as large as its largest so far), not one turn after it."""
    spec = {
        "agent": "counter",
        "prompt": "count to 50, chunk 4000",
        "budgets": {"max_tokens": 5000, "max_turns": 60},
    }
    handle = await env.start(spec)
    result: TaskResult = await asyncio.wait_for(handle.result(), 120)
    assert result.phase is TaskPhase.HANDED_OFF
    assert result.reason and result.reason.startswith("max_tokens budget exhausted")
    used = result.usage.input_tokens + result.usage.output_tokens
    assert used <= 5000 < used + result.usage.largest_turn_tokens, (used, result.usage.largest_turn_tokens)
    assert "the next turn may take" in result.reason
