"""Baselines: bare Temporal workflows and activities doing the same work as an agent-worker task, with
nothing around it (no policy, approvals, events, evidence, budgets, sandbox lifecycle).

- ``BareCount`` runs ``bare.step`` until the script answers: one activity per step, which loads the
  conversation from a local file, makes the same model call through the same SDK ``Runner`` (the
  shared script, ``bench.script``), runs the shell command the model asked for, and saves the
  conversation. It continues as new when Temporal suggests it.
- ``BareSplitCount`` does the same work as two activities per step, as the issue's baseline for the
  step target defines it: ``bare.model`` (the model call through the ``Runner``, its tool call not
  run) and ``bare.command`` (the shell command, its output added to the conversation).
- ``BareNoop`` runs ``bare.noop`` N times: the cost of one activity round trip.
- ``BareApproval`` waits for the signal ``approve``, then ``bare.commit`` inserts one row.
- ``BareApprovalAnswer`` does the same, then ``bare.answer`` gives the model the receipt, as an agent
  does after its write: one model call through the ``Runner`` (``bench.agents.ApprovalModel``).
- ``BareSlow`` runs ``bare.slow_steps``: six 0.4 s steps, heartbeating the step reached and resuming
  from it on retry (the standard Temporal pattern), each step logged like ``bench-notes`` calls.

Run a worker in its own process with ``python -m bench.bare --address HOST:PORT --task-queue Q
--data-dir DIR`` (SIGTERM stops it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench import script
    from bench.script import run_shell as shell  # the tool's parameter is named script

STEP_TIMEOUT = timedelta(minutes=2)
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
# The same as agent-worker's activities (workflows/options.py HEARTBEAT, worker.py throttle).
HEARTBEAT = timedelta(seconds=10)
HEARTBEAT_THROTTLE = timedelta(seconds=2)


class StepInput(BaseModel):
    task_id: str
    prompt: str


class StepResult(BaseModel):
    done: bool
    output: str


class CountInput(BaseModel):
    prompt: str
    steps: int = 0


class CountResult(BaseModel):
    steps: int
    runs: int
    output: str


class ModelResult(BaseModel):
    done: bool
    output: str
    call_id: str = ""
    script: str = ""


class CommandInput(BaseModel):
    task_id: str
    call_id: str
    script: str


class CommitInput(BaseModel):
    task_id: str


class SlowInput(BaseModel):
    task_id: str


class BareActivities:
    """The baseline activities; conversations and committed rows live under ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.conversations = self.data_dir / "conversations"
        self.conversations.mkdir(parents=True, exist_ok=True)
        self.db = self.data_dir / "bare.db"
        with sqlite3.connect(self.db) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS rows (task_id TEXT PRIMARY KEY, committed_at TEXT NOT NULL)"
            )
        self._agents: dict[bool, object] = {}
        self._answering: Any = None

    def agent(self, run_tool: bool = True):  # noqa: ANN201 - lazily: the SDK is imported only in activities
        """The bare agent; with ``run_tool`` False its tool returns nothing and runs nothing (the
        command is ``bare.command``'s)."""
        if run_tool not in self._agents:
            from agents import Agent, function_tool

            @function_tool(name_override=script.TOOL)
            async def run_shell(script: str) -> str:
                """Run a shell script.

                Args:
                    script: The script, run by sh -c.
                """
                return await shell(script) if run_tool else ""

            self._agents[run_tool] = Agent(
                name="bare",
                instructions="Run what you are asked.",
                tools=[run_shell],
                tool_use_behavior="stop_on_first_tool",
            )
        return self._agents[run_tool]

    def conversation(self, task_id: str) -> Path:
        return self.conversations / f"{task_id.replace('/', '_')}.json"

    @activity.defn(name="bare.step")
    async def step(self, input: StepInput) -> StepResult:
        """One model call and the command it asks for; the conversation is kept in a local file."""
        from agents import RunConfig, Runner

        from bench.agents import CountModel

        path = self.conversation(input.task_id)
        items = await asyncio.to_thread(_load, path)
        result = await Runner.run(
            self.agent(),
            items or input.prompt,
            run_config=RunConfig(model=CountModel(), tracing_disabled=True),
            max_turns=2,
        )
        await asyncio.to_thread(path.write_text, json.dumps(result.to_input_list()))
        done = not result.new_items or result.new_items[-1].type == "message_output_item"
        return StepResult(done=done, output=str(result.final_output))

    @activity.defn(name="bare.model")
    async def model(self, input: StepInput) -> ModelResult:
        """One model call; the tool call it makes is returned, not run, and left out of the saved
        conversation until ``bare.command`` adds its output."""
        from agents import RunConfig, Runner

        from bench.agents import CountModel

        path = self.conversation(input.task_id)
        items = await asyncio.to_thread(_load, path)
        result = await Runner.run(
            self.agent(run_tool=False),
            items or input.prompt,
            run_config=RunConfig(model=CountModel(), tracing_disabled=True),
            max_turns=2,
        )
        conversation = result.to_input_list()
        if conversation and conversation[-1].get("type") == "function_call_output":
            conversation.pop()  # bare.command adds the real output
        await asyncio.to_thread(path.write_text, json.dumps(conversation))
        calls = [i for i in conversation if i.get("type") == "function_call"]
        if not result.new_items or result.new_items[-1].type == "message_output_item" or not calls:
            return ModelResult(done=True, output=str(result.final_output))
        call = calls[-1]
        arguments = json.loads(call["arguments"])
        return ModelResult(done=False, output="", call_id=call["call_id"], script=arguments["script"])

    @activity.defn(name="bare.command")
    async def command(self, input: CommandInput) -> str:
        """Run the model's command and add its output to the conversation."""
        out = await shell(input.script)
        path = self.conversation(input.task_id)
        items = await asyncio.to_thread(_load, path) or []
        items.append({"type": "function_call_output", "call_id": input.call_id, "output": out})
        await asyncio.to_thread(path.write_text, json.dumps(items))
        return out

    @activity.defn(name="bare.noop")
    async def noop(self) -> None:
        """Nothing: the cost of the round trip itself."""

    @activity.defn(name="bare.commit")
    async def commit(self, input: CommitInput) -> None:
        """Insert the task's row (once: the task id is the key)."""
        now = datetime.now(UTC).isoformat()
        await asyncio.to_thread(self._insert, input.task_id, now)

    def _insert(self, task_id: str, now: str) -> None:
        with sqlite3.connect(self.db, timeout=30) as db:
            db.execute("INSERT OR IGNORE INTO rows VALUES (?, ?)", (task_id, now))

    @activity.defn(name="bare.answer")
    async def answer(self, input: CommitInput) -> str:
        """The model's answer once the write is done: the prompt, its write call and the receipt,
        through the ``Runner`` to ``ApprovalModel`` (which answers ``recorded as ...``)."""
        from agents import Agent, RunConfig, Runner

        from bench.agents import ApprovalModel

        call = {"value": input.task_id}
        items = [
            {"role": "user", "content": f"record: {input.task_id}"},
            {
                "type": "function_call",
                "call_id": "call_record",
                "name": "record_value",
                "arguments": json.dumps(call),
            },
            {
                "type": "function_call_output",
                "call_id": "call_record",
                "output": json.dumps({"record_id": input.task_id}),
            },
        ]
        if self._answering is None:
            self._answering = Agent(name="bare-approval", instructions="Record values.")
        result = await Runner.run(
            self._answering,
            items,  # type: ignore[arg-type]
            run_config=RunConfig(model=ApprovalModel(), tracing_disabled=True),
            max_turns=1,
        )
        return str(result.final_output)

    @activity.defn(name="bare.slow_steps")
    async def slow_steps(self, input: SlowInput) -> None:
        """Six slow steps, resumed from the last heartbeat on retry; each logged like a model call."""
        from bench.agents import CALL_LOG_ENV, NOTE_SECONDS, NOTES, append_line

        details = activity.info().heartbeat_details
        start = int(details[0]) if details else 0
        for index in range(start, NOTES + 1):
            await asyncio.sleep(NOTE_SECONDS)
            log = os.environ.get(CALL_LOG_ENV)
            if log:
                line = f"{input.task_id} {os.getpid()} {index} {time.time():.3f}\n"
                await asyncio.to_thread(append_line, log, line)
            activity.heartbeat(index + 1)


def _load(path: Path) -> list | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


@workflow.defn(name="BareCount")
class BareCount:
    """``bare.step`` until the script answers; continue-as-new when Temporal suggests it."""

    @workflow.run
    async def run(self, input: CountInput) -> CountResult:
        steps, runs = input.steps, 1
        while True:
            result = await workflow.execute_activity_method(
                BareActivities.step,
                StepInput(task_id=workflow.info().workflow_id, prompt=input.prompt),
                start_to_close_timeout=STEP_TIMEOUT,
                retry_policy=RETRY,
            )
            steps += 1
            if result.done:
                return CountResult(steps=steps, runs=runs, output=result.output)
            if workflow.info().is_continue_as_new_suggested():
                workflow.continue_as_new(CountInput(prompt=input.prompt, steps=steps))


@workflow.defn(name="BareSplitCount")
class BareSplitCount:
    """``bare.model`` then ``bare.command`` until the script answers: one activity per model call and
    one per command; continue-as-new when Temporal suggests it."""

    @workflow.run
    async def run(self, input: CountInput) -> CountResult:
        steps, runs = input.steps, 1
        task_id = workflow.info().workflow_id
        while True:
            result = await workflow.execute_activity_method(
                BareActivities.model,
                StepInput(task_id=task_id, prompt=input.prompt),
                start_to_close_timeout=STEP_TIMEOUT,
                retry_policy=RETRY,
            )
            steps += 1
            if result.done:
                return CountResult(steps=steps, runs=runs, output=result.output)
            await workflow.execute_activity_method(
                BareActivities.command,
                CommandInput(task_id=task_id, call_id=result.call_id, script=result.script),
                start_to_close_timeout=STEP_TIMEOUT,
                retry_policy=RETRY,
            )
            if workflow.info().is_continue_as_new_suggested():
                workflow.continue_as_new(CountInput(prompt=input.prompt, steps=steps))


@workflow.defn(name="BareNoop")
class BareNoop:
    """``bare.noop`` ``count`` times in a row."""

    @workflow.run
    async def run(self, count: int) -> int:
        for _ in range(count):
            await workflow.execute_activity_method(
                BareActivities.noop, start_to_close_timeout=STEP_TIMEOUT, retry_policy=RETRY
            )
        return count


@workflow.defn(name="BareApproval")
class BareApproval:
    """Waits for ``approve``, then commits one row."""

    def __init__(self) -> None:
        self.approved = False

    @workflow.signal(name="approve")
    def approve(self) -> None:
        self.approved = True

    @workflow.query(name="parked")
    def parked(self) -> bool:
        """Whether the workflow waits for ``approve`` (answering runs its first workflow task)."""
        return not self.approved

    @workflow.run
    async def run(self) -> None:
        await self.commit_once_approved()

    async def commit_once_approved(self) -> CommitInput:
        """Wait for ``approve``, commit the row; the commit's input."""
        await workflow.wait_condition(lambda: self.approved)
        task = CommitInput(task_id=workflow.info().workflow_id)
        await workflow.execute_activity_method(
            BareActivities.commit, task, start_to_close_timeout=STEP_TIMEOUT, retry_policy=RETRY
        )
        return task


@workflow.defn(name="BareApprovalAnswer")
class BareApprovalAnswer(BareApproval):
    """``BareApproval``, then ``bare.answer``: what an agent does after an approved write."""

    @workflow.run
    async def run(self) -> None:
        task = await self.commit_once_approved()
        await workflow.execute_activity_method(
            BareActivities.answer, task, start_to_close_timeout=STEP_TIMEOUT, retry_policy=RETRY
        )


@workflow.defn(name="BareSlow")
class BareSlow:
    """One ``bare.slow_steps`` activity with agent-worker's heartbeat timeout."""

    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity_method(
            BareActivities.slow_steps,
            SlowInput(task_id=workflow.info().workflow_id),
            start_to_close_timeout=STEP_TIMEOUT,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RETRY,
        )


WORKFLOWS = [BareCount, BareSplitCount, BareNoop, BareApproval, BareApprovalAnswer, BareSlow]


def build_worker(client: Client, task_queue: str, data_dir: Path) -> Worker:
    """A worker for every baseline, with the SDK's defaults (plus agent-worker's heartbeat throttle)."""
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    acts = BareActivities(data_dir)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=[
            acts.step,
            acts.model,
            acts.command,
            acts.noop,
            acts.commit,
            acts.answer,
            acts.slow_steps,
        ],
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )


async def _serve(address: str, task_queue: str, data_dir: Path) -> None:
    from temporalio.contrib.pydantic import pydantic_data_converter

    client = await Client.connect(address, data_converter=pydantic_data_converter)
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    # The model's answer once before serving: its imports and the SDK's first-call costs stay out
    # of what the benchmarks measure, as for agent-worker, whose tasks made their first turn before.
    await BareActivities(data_dir).answer(CommitInput(task_id="warm-up"))
    async with build_worker(client, task_queue, data_dir):
        print("bare worker started", flush=True)
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run a worker for the bare baselines.")
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.address, args.task_queue, args.data_dir))
