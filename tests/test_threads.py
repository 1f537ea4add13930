"""Threads and follow-up input: a task naming a thread continues the conversation of the thread's
latest finished task (found through visibility, by digest, never through history); a thread with no
finished task starts fresh, and one with a task still running refuses a second; `agent-worker say`
reaches a running task, whose next turn sees the input, or, with the policy's `on_input: interrupt`,
whose running turn stops and starts again with it. Real dev server, real worker."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_worker.activities.events import JsonlEventSink
from agent_worker.schemas import visibility
from agent_worker.schemas.tasks import TaskPhase, TaskResult

from tests.helpers.support import TEST_AGENTS, TaskEnv, assert_replays, make_config, run_cli, running_worker

THREAD_AGENTS = [*TEST_AGENTS, "tests.helpers.thread_agent:registrations"]


@pytest.fixture
async def threads_env(config_env: TaskEnv) -> AsyncIterator[TaskEnv]:
    """A task env whose worker also serves the ``memory`` agent."""
    env = TaskEnv(
        client=config_env.client,
        config=make_config(config_env.config.data_dir, agents=THREAD_AGENTS),
        address=config_env.address,
    )
    async with running_worker(env.client, env.config):
        yield env


def memory_task(prompt: str, thread: str | None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"agent": "memory", "prompt": prompt, **extra}
    if thread is not None:
        spec["thread"] = thread
    return spec


def new_thread() -> str:
    return f"th-{uuid.uuid4().hex[:10]}"


def event_data(env: TaskEnv, task_id: str, type: str) -> list[dict[str, Any]]:
    """The data of each ``type`` event the task published (the workflow's state is not queryable
    once closed; its events travel in local activities, whose inputs no history records)."""
    return [e.data for e in JsonlEventSink(env.config.events_dir).read(task_id) if e.type.value == type]


async def test_a_second_task_on_the_thread_answers_from_the_first_tasks_conversation(
    threads_env: TaskEnv,
) -> None:
    """The first task is told a code word; the second, on the same thread, is only asked for it and
    answers with it: its first turn started from the first task's conversation (by digest: the word
    is in no input or activity of the second task's history but the prompt's question)."""
    env, thread = threads_env, new_thread()
    first = await env.start(memory_task("Remember: the code word is heron.", thread))
    told = await first.result()
    assert told.phase is TaskPhase.COMPLETED and told.final_output == "noted"
    assert told.conversation_ref is not None

    second = await env.start(memory_task("What is the code word?", thread))
    answered = await second.result()
    assert answered.phase is TaskPhase.COMPLETED, answered.reason
    assert answered.final_output == "the code word is heron"
    assert answered.conversation_ref not in (None, told.conversation_ref)

    history = await assert_replays(env.client, second.id)
    assert "Remember: the code word" not in history  # the conversation crossed by reference only
    [continued] = event_data(env, second.id, "thread.continued")
    assert continued["from_task"] == first.id and continued["thread"] == thread
    described = await second.describe()
    assert described.typed_search_attributes.get(visibility.THREAD) == thread
    await assert_replays(env.client, first.id)


async def test_a_task_on_a_thread_with_no_earlier_task_starts_fresh(threads_env: TaskEnv) -> None:
    """Asked for a code word on a new thread, the agent knows none; a task told the word on another
    thread does not leak into it."""
    env = threads_env
    told = await env.start(memory_task("Remember: the code word is osprey.", new_thread()))
    assert (await told.result()).phase is TaskPhase.COMPLETED
    handle = await env.start(memory_task("What is the code word?", new_thread()))
    result = await handle.result()
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "I do not know the code word"
    await assert_replays(env.client, handle.id)
    assert event_data(env, handle.id, "thread.started")
    assert not event_data(env, handle.id, "thread.continued")


async def test_a_task_on_a_thread_whose_last_task_still_runs_is_refused_with_the_reason(
    threads_env: TaskEnv,
) -> None:
    """While the thread's first task waits for an approval, a second task on the thread ends
    `rejected` at start, naming the running task; the first then finishes untouched."""
    env, thread = threads_env, new_thread()
    first = await env.start(memory_task("wait for me", thread, policy=gated()))
    await env.awaiting_approval(first)
    second = await env.start(memory_task("What is the code word?", thread))
    refused = await second.result()
    assert refused.phase is TaskPhase.REJECTED
    assert refused.reason is not None and first.id in refused.reason and "still running" in refused.reason
    await env.approve(first, principal="ana")
    assert (await first.result()).phase is TaskPhase.COMPLETED
    await assert_replays(env.client, second.id)


def gated() -> dict[str, Any]:
    return {"rules": [{"tool": "run_shell", "decision": "require_approval", "approvers": ["ana"]}]}


async def test_agent_worker_say_reaches_a_running_task_and_its_next_turn_sees_it(
    threads_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """While the task waits for an approval, `agent-worker say TASK "..." --principal ana` queues the
    input (event `input.added` with the principal); after the approval the next turn's model sees it
    as the user's next message and answers with it."""
    env = threads_env
    handle = await env.start(memory_task("wait for me", None, policy=gated()))
    await env.awaiting_approval(handle)
    code, out, err = await run_cli(
        capsys, "--address", env.address, "say", handle.id, "also bring the map", "--principal", "ana"
    )
    assert code == 0, err
    assert "input sent" in out
    status = await env.wait_status(
        handle, lambda s: any(e.type.value == "input.added" for e in s.last_events)
    )
    [added] = [e for e in status.last_events if e.type.value == "input.added"]
    assert added.data["principal"] == "ana"
    await env.approve(handle, principal="ana")
    result: TaskResult = await handle.result()
    assert result.phase is TaskPhase.COMPLETED, result.reason
    assert result.final_output == "heard: also bring the map"
    await assert_replays(env.client, handle.id)


async def test_say_to_an_unknown_task_fails_naming_it(
    threads_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """`say` to a task id no running task has exits 1 with the id in the message."""
    code, _, err = await run_cli(capsys, "--address", threads_env.address, "say", "no-such-task", "hello")
    assert code == 1
    assert "no-such-task" in err


async def say_during_the_first_turn(
    env: TaskEnv, on_input: str, capsys: pytest.CaptureFixture[str]
) -> tuple[TaskResult, str]:
    """Start a ``chatter`` task, say "stop now" once its first turn runs; its result and id."""
    handle = await env.start({"agent": "chatter", "prompt": "take notes", "policy": {"on_input": on_input}})
    await env.wait_status(handle, lambda s: any(e.type.value == "turn.started" for e in s.last_events))
    code, _, err = await run_cli(capsys, "--address", env.address, "say", handle.id, "stop now")
    assert code == 0, err
    result = await handle.result()
    assert result.phase is TaskPhase.COMPLETED, result.reason
    await assert_replays(env.client, handle.id)
    return result, handle.id


async def test_input_interrupts_the_running_turn_when_the_policy_says_so(
    threads_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """With `on_input: interrupt`, input said while the first turn takes its 40 notes cancels that
    turn; the turn starts again with the input and the agent stops before its 40th note."""
    result, task_id = await say_during_the_first_turn(threads_env, "interrupt", capsys)
    assert result.final_output is not None and result.final_output.startswith("stopped after")
    assert int(result.final_output.split()[2]) < 40
    assert result.usage.turns == 1  # the interrupted turn is not counted; it left nothing behind
    assert event_data(threads_env, task_id, "turn.interrupted") == [{"turn": 1, "follow_ups": 1}]


async def test_input_waits_for_the_next_turn_by_default(
    threads_env: TaskEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the default `on_input: next_turn`, the first turn takes all 40 notes and the next turn
    sees the input."""
    result, task_id = await say_during_the_first_turn(threads_env, "next_turn", capsys)
    assert result.final_output == "stopped after 40 notes"
    assert result.usage.turns == 2
    assert not event_data(threads_env, task_id, "turn.interrupted")
