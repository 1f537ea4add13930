"""Agents that exist only for tests, with deterministic conversation models."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from agent_worker.activities.agent import (
    AgentRegistration,
    ConversationModel,
    delegate_tool,
    sandbox_tool,
    tool_outputs,
    write_tool,
)
from agent_worker.schemas.actions import BusinessWrite, Delegation, SandboxCommand
from agents import Agent, function_tool
from agents.items import TResponseOutputItem
from agents.sandbox import SandboxAgent
from agents.sandbox.capabilities import Compaction, Filesystem, Shell
from agents.testing import assistant_message, function_call

from agent_worker.testing import Script

# Where the `notes` model logs each call it really makes (set by the crash test).
CALL_LOG_ENV = "AW_TEST_CALL_LOG"


@sandbox_tool
def run_shell(script: str) -> SandboxCommand:
    """Run a shell script in the sandbox.

    Args:
        script: The script, run by sh -c.
    """
    return SandboxCommand(argv=["sh", "-c", script])


def _user_texts(items: list[dict[str, Any]]) -> list[str]:
    texts = []
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            texts.append(content if isinstance(content, str) else json.dumps(content))
    return texts


class ShellScript(ConversationModel):
    """Runs the script given after 'run:' in the prompt once, then reports its output and any
    follow-up input the user added."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        users = _user_texts(items)
        if "run_shell" in outputs:
            follow_ups = " | ".join(users[1:])
            return [
                assistant_message(
                    f"shell said: {outputs['run_shell']}"
                    + (f" / you added: {follow_ups}" if follow_ups else "")
                )
            ]
        script = users[0].split("run:", 1)[1].split("\n\n")[0].strip() if "run:" in users[0] else "true"
        return [function_call("run_shell", {"script": script}, call_id="call_shell")]


@function_tool
def note(index: int) -> str:
    """Write down a note.

    Args:
        index: The note's number.
    """
    return f"noted {index}"


class NotesScript(ConversationModel):
    """Takes six notes with a read tool, all inside one turn, each model call slow and logged."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        done = sum(1 for i in items if i.get("type") == "function_call_output")
        log = os.environ.get(CALL_LOG_ENV)
        if log:
            with open(log, "a") as f:
                f.write(f"{done}\n")
        time.sleep(0.4)
        if done < 6:
            return [function_call("note", {"index": done}, call_id=f"call_note_{done}")]
        return [assistant_message(f"took {done} notes")]


class CountScript(ConversationModel):
    """Echoes 1..N in the sandbox, one command per turn (N from 'count to N', chunk size from 'chunk
    K'), then answers with the sum of what the sandbox printed."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        prompt = _user_texts(items)[0]
        target = int(re.search(r"count to (\d+)", prompt).group(1))  # type: ignore[union-attr]
        chunk = int(m.group(1)) if (m := re.search(r"chunk (\d+)", prompt)) else 0
        printed = [
            json.loads(i["output"])["stdout"] for i in items if i.get("type") == "function_call_output"
        ]
        n = len(printed)
        if n < target:
            script = f"echo {n + 1}" + (f" && python3 -c 'print(\"x\" * {chunk})'" if chunk else "")
            return [function_call("run_shell", {"script": script}, call_id=f"call_count_{n + 1}")]
        total = sum(int(p.split()[0]) for p in printed)
        chars = sum(len(p) for p in printed)
        return [assistant_message(f"counted to {n}: sum {total}, read {chars} characters of tool output")]


@delegate_tool
def delegate(agent: str, task: str) -> Delegation:
    """Hand a sub-task to another agent.

    Args:
        agent: The agent to run the sub-task.
        task: What it should do.
    """
    return Delegation(agent=agent, prompt=task)


class ManagerScript(ConversationModel):
    """Delegates what follows 'delegate to AGENT:' in the prompt, then reports the outcome."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "delegate" in outputs:
            child = json.loads(outputs["delegate"])
            if child["phase"] == "completed":
                return [assistant_message(f"sub-task said: {child['final_output']}")]
            return [assistant_message(f"sub-task {child['phase']}: {child['reason']}")]
        match = re.search(r"delegate to ([\w-]+): (.*)", _user_texts(items)[0], re.S)
        assert match, "the prompt must say 'delegate to AGENT: TASK'"
        return [
            function_call(
                "delegate", {"agent": match.group(1), "task": match.group(2).strip()}, call_id="call_sub"
            )
        ]


@write_tool
def record_value(value: str) -> BusinessWrite:
    """Record a value in the business system.

    Args:
        value: The value.
    """
    return BusinessWrite(record_type="value", payload={"value": value})


class RecorderScript(ConversationModel):
    """Records the value after 'record:' in the prompt; with 'first run: SCRIPT' it proposes that
    command in the same turn, before the write."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "record_value" in outputs:
            receipt = json.loads(outputs["record_value"]) if outputs["record_value"].startswith("{") else {}
            if receipt.get("outcome") == "committed":
                return [assistant_message(f"recorded as {receipt['record_id']}")]
            return [assistant_message(f"not recorded: {outputs['record_value']}")]
        prompt = _user_texts(items)[0]
        value = re.search(r"record: (\S+)", prompt).group(1)  # type: ignore[union-attr]
        calls = []
        if match := re.search(r"first run: (.+?);", prompt):
            calls.append(function_call("run_shell", {"script": match.group(1)}, call_id="call_first"))
        calls.append(function_call("record_value", {"value": value}, call_id="call_record"))
        return calls


class HallucinatingScript(ConversationModel):
    """Calls a tool its agent does not have, then reports what it was told about that call."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "wipe_ledger" in outputs:
            return [assistant_message(f"the missing tool said: {outputs['wipe_ledger']}")]
        return [function_call("wipe_ledger", {"confirm": True}, call_id="call_ghost")]


def _shell_agent(name: str) -> Agent:
    return Agent(name=name, instructions="Run what you are asked.", tools=[run_shell])


registrations = [
    AgentRegistration(name="shell", build=lambda: _shell_agent("shell"), scripted_model=ShellScript),
    AgentRegistration(
        name="notes",
        build=lambda: Agent(name="notes", instructions="Take notes.", tools=[note]),
        scripted_model=NotesScript,
    ),
    AgentRegistration(name="counter", build=lambda: _shell_agent("counter"), scripted_model=CountScript),
    AgentRegistration(
        name="plain", build=lambda: Agent(name="plain", instructions="Answer briefly."), scripted_model=None
    ),
    AgentRegistration(
        name="recorder",
        build=lambda: Agent(name="recorder", instructions="Record values.", tools=[run_shell, record_value]),
        scripted_model=RecorderScript,
    ),
    AgentRegistration(
        name="hallucinator", build=lambda: _shell_agent("hallucinator"), scripted_model=HallucinatingScript
    ),
    AgentRegistration(
        name="manager",
        build=lambda: Agent(name="manager", instructions="Delegate.", tools=[delegate]),
        scripted_model=ManagerScript,
    ),
]


class LoudScript(ConversationModel):
    """Runs 'print N bytes K times': K commands, one per turn, each printing N bytes to stdout; then
    answers with the exit codes it saw. With 'answer M chars' it answers with M characters instead."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        prompt = _user_texts(items)[0]
        if match := re.search(r"answer (\d+) chars", prompt):
            return [assistant_message("y" * int(match.group(1)))]
        size, times = (int(g) for g in re.search(r"print (\d+) bytes (\d+) times", prompt).groups())  # type: ignore[union-attr]
        seen = [json.loads(i["output"]) for i in items if i.get("type") == "function_call_output"]
        if len(seen) < times:
            script = f"head -c {size} /dev/zero | tr '\\0' x"
            return [function_call("run_shell", {"script": script}, call_id=f"call_loud_{len(seen) + 1}")]
        return [assistant_message(f"printed {[(s['exit_code'], len(s['stdout'])) for s in seen]}")]


registrations.append(
    AgentRegistration(name="loud", build=lambda: _shell_agent("loud"), scripted_model=LoudScript)
)

# Each of the batcher's commands prints when it started and ended (seconds since the epoch), around a
# sleep of the seconds given in the prompt ('batch of 2 sleeping 5').
TIMED_SLEEP = 's=$(date +%s.%N); sleep {seconds}; echo "$s $(date +%s.%N)"'


class BatchScript(ConversationModel):
    """One response with several allowed commands and one gated write ('batch of N sleeping S'), then
    an answer naming the outputs it saw."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        if outputs:
            return [assistant_message(f"saw {len(outputs)} results")]
        count, seconds = (
            int(g) for g in re.search(r"batch of (\d+) sleeping (\d+)", _user_texts(items)[0]).groups()
        )  # type: ignore[union-attr]
        script = TIMED_SLEEP.format(seconds=seconds)
        calls = [
            function_call("run_shell", {"script": script}, call_id=f"call_cmd_{i}") for i in range(count)
        ]
        return [*calls, function_call("record_value", {"value": "batch"}, call_id="call_write")]


registrations.append(
    AgentRegistration(
        name="batcher",
        build=lambda: Agent(name="batcher", instructions="Run and record.", tools=[run_shell, record_value]),
        scripted_model=BatchScript,
    )
)

# The coder is an SDK SandboxAgent: it runs the failing test, patches calc.py, runs the test again and
# shows what its commands left in the workspace. Each command appends to runs.log, so a command run
# twice shows there.
CODER_TEST = "echo run >> runs.log; python3 test_calc.py"
CODER_PATCH = """*** Begin Patch
*** Update File: calc.py
@@ def add(a, b):
-    return a - b
+    return a + b
*** End Patch
"""


def _coder() -> Agent:
    return SandboxAgent(
        name="coder", instructions="Make the tests pass.", capabilities=[Shell(), Filesystem(), Compaction()]
    )


registrations.append(
    AgentRegistration(
        name="coder",
        build=_coder,
        scripted_model=lambda: Script(
            ("exec_command", {"cmd": CODER_TEST}),
            ("apply_patch", {"patch": CODER_PATCH}),
            ("exec_command", {"cmd": CODER_TEST}),
            ("exec_command", {"cmd": "cat runs.log calc.py"}),
            "Fixed: add() adds.",
        ),
    )
)
