"""Agents the benchmarks run on agent-worker (``AGENT_WORKER_AGENTS=bench.agents:registrations``).

- ``bench-counter``: the shared script (``bench.script``): ``count to N`` runs ``echo 1`` .. ``echo N``
  in the sandbox, one command per turn, then answers. Steps, the plugin comparison, the long task.
- ``bench-slow-counter``: the same, each model call taking ``AW_BENCH_MODEL_LATENCY_MS`` (200 ms):
  a remote model's latency, simulated (the fleet benchmark).
- ``bench-notes``: one turn of six read-tool calls, each model call taking 0.4 s and logged to
  ``AW_BENCH_CALL_LOG`` (task, pid, call index, time): crash recovery.
- ``bench-approval``: proposes one business write (``record: VALUE``) and reports the receipt:
  parked approvals.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from typing import Any

from agent_worker.activities.agent import (
    AgentRegistration,
    ConversationModel,
    sandbox_tool,
    tool_outputs,
    write_tool,
)
from agent_worker.schemas.actions import BusinessWrite, SandboxCommand
from agents import Agent, function_tool
from agents.items import ModelResponse, TResponseOutputItem
from agents.testing import assistant_message, function_call
from temporalio import activity

from agent_worker.client import workflow_input
from bench import script

CALL_LOG_ENV = "AW_BENCH_CALL_LOG"
LATENCY_ENV = "AW_BENCH_MODEL_LATENCY_MS"
DEFAULT_LATENCY_MS = 200
NOTES = 6
NOTE_SECONDS = 0.4


@sandbox_tool(name=script.TOOL)
def run_shell(script: str) -> SandboxCommand:
    """Run a shell script in the sandbox.

    Args:
        script: The script, run by sh -c.
    """
    return SandboxCommand(argv=["sh", "-c", script])


class CountModel(ConversationModel):
    """The shared ``count to N`` script."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        move = script.next_move(items)
        if move.text is not None:
            return [assistant_message(move.text)]
        return [function_call(script.TOOL, move.arguments, call_id=move.call_id)]


class SlowCountModel(CountModel):
    """The shared script behind a simulated model latency (an awaited sleep, like a network call)."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        await asyncio.sleep(int(os.environ.get(LATENCY_ENV, DEFAULT_LATENCY_MS)) / 1000)
        return await super().get_response(*args, **kwargs)


@function_tool
def note(index: int) -> str:
    """Write down a note.

    Args:
        index: The note's number.
    """
    return f"noted {index}"


class NotesModel(ConversationModel):
    """Six notes with a read tool in one turn; every call is slow and logged, so a crash test can see
    which calls ran, where, and which ran twice."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        done = sum(1 for i in items if i.get("type") == "function_call_output")
        if done < NOTES:
            return [function_call("note", {"index": done}, call_id=f"call_note_{done}")]
        return [assistant_message(f"took {done} notes")]

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any):
        done = sum(1 for i in script.conversation(input) if i.get("type") == "function_call_output")
        await asyncio.sleep(NOTE_SECONDS)
        log = os.environ.get(CALL_LOG_ENV)
        if log:
            line = f"{activity.info().workflow_id} {os.getpid()} {done} {time.time():.3f}\n"
            await asyncio.to_thread(append_line, log, line)
        return await super().get_response(system_instructions, input, *args, **kwargs)


def append_line(path: str, line: str) -> None:
    """Append one line (one small O_APPEND write, so concurrent writers never tear lines)."""
    with open(path, "a") as f:
        f.write(line)


@write_tool
def record_value(value: str) -> BusinessWrite:
    """Record a value in the business system.

    Args:
        value: The value.
    """
    return BusinessWrite(record_type="value", payload={"value": value})


class ApprovalModel(ConversationModel):
    """Records the value after ``record:`` in the prompt, then reports the receipt."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "record_value" in outputs:
            receipt = outputs["record_value"]
            record = json.loads(receipt).get("record_id") if receipt.startswith("{") else receipt
            return [assistant_message(f"recorded as {record}")]
        match = re.search(r"record: (\S+)", script.conversation(items)[0].get("content", ""))
        value = match.group(1) if match else "none"
        return [function_call("record_value", {"value": value}, call_id="call_record")]


def _counter(name: str) -> Agent:
    return Agent(name=name, instructions="Run what you are asked.", tools=[run_shell])


registrations = [
    AgentRegistration(
        name="bench-counter", build=lambda: _counter("bench-counter"), scripted_model=CountModel
    ),
    AgentRegistration(
        name="bench-slow-counter", build=lambda: _counter("bench-slow-counter"), scripted_model=SlowCountModel
    ),
    AgentRegistration(
        name="bench-notes",
        build=lambda: Agent(name="bench-notes", instructions="Take notes.", tools=[note]),
        scripted_model=NotesModel,
    ),
    AgentRegistration(
        name="bench-approval",
        build=lambda: Agent(name="bench-approval", instructions="Record values.", tools=[record_value]),
        scripted_model=ApprovalModel,
    ),
]


def counting_task(target: int, agent: str = "bench-counter", **extra: Any) -> dict[str, Any]:
    """A TaskSpec for ``count to target`` with budgets that let it finish."""
    budgets = {
        "max_turns": target + 5,
        "max_actions": target + 5,
        "max_model_calls": target + 5,
        "max_sandbox_seconds": 3600 + target * 10,
    }
    return {"agent": agent, "prompt": f"count to {target}", "budgets": budgets, **extra}


APPROVER = "bench-approver"


def approval_task(value: str, **extra: Any) -> dict[str, Any]:
    """The workflow input of a task whose one business write waits for ``APPROVER``, as
    ``AgentWorkerClient.start_task`` sends it (``workflow_input``: the current release line, which
    asks one patch at the start; a spec alone begins on 0.1 and asks six, each a marker and a
    search-attribute upsert). ``extra`` joins the spec."""
    spec = {
        "agent": "bench-approval",
        "prompt": f"record: {value}",
        "policy": {
            "rules": [{"tool": "record_value", "decision": "require_approval", "approvers": [APPROVER]}]
        },
        **extra,
    }
    return workflow_input(spec)
