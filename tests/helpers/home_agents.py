"""A scripted agent for the sandbox-home tests: it leaves a file in its sandbox with one command,
then reads it back with a second (which its task's policy puts up for approval), and when that read
worked, checks the file once more with a third; it answers with what the second printed."""

from __future__ import annotations

import json
from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel, sandbox_tool, tool_outputs
from agent_worker.schemas.actions import SandboxCommand
from agents import Agent
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

MARK = "made in this sandbox"


@sandbox_tool
def write_mark() -> SandboxCommand:
    """Leave a file in the sandbox's work dir."""
    return SandboxCommand(argv=["sh", "-c", f"echo '{MARK}' > mark.txt && cat mark.txt"])


@sandbox_tool
def read_mark() -> SandboxCommand:
    """Read the file back."""
    return SandboxCommand(argv=["sh", "-c", "cat mark.txt"])


@sandbox_tool
def check_mark() -> SandboxCommand:
    """Check that the file is still there."""
    return SandboxCommand(argv=["test", "-f", "mark.txt"])


@sandbox_tool
def linger() -> SandboxCommand:
    """Note the start, take a while, then note the end; print both notes."""
    return SandboxCommand(
        argv=[
            "sh",
            "-c",
            "echo start >> started.txt; sleep 4; echo end >> ended.txt; cat started.txt ended.txt",
        ]
    )


class LingerScript(ConversationModel):
    """write_mark, then linger, then the answer: ``lingered: <stdout>``."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "linger" in outputs:
            result = json.loads(outputs["linger"])
            return [assistant_message(f"lingered: {' '.join(result['stdout'].split())}")]
        if "write_mark" in outputs:
            return [function_call("linger", {}, call_id="call_linger")]
        return [function_call("write_mark", {}, call_id="call_write")]


class MarkScript(ConversationModel):
    """write_mark, read_mark, check_mark, then the answer: ``read: <stdout>`` (``read failed: <stderr>``
    right after the read)."""

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        outputs = tool_outputs(items)
        if "read_mark" in outputs:
            try:
                result = json.loads(outputs["read_mark"])
            except ValueError:
                return [assistant_message(f"read refused: {outputs['read_mark']}")]
            if result.get("exit_code") != 0:
                return [assistant_message(f"read failed: {result.get('stderr', result).strip()}")]
            if "check_mark" not in outputs:
                return [function_call("check_mark", {}, call_id="call_check")]
            return [assistant_message(f"read: {result['stdout'].strip()}")]
        if "write_mark" in outputs:
            return [function_call("read_mark", {}, call_id="call_read")]
        return [function_call("write_mark", {}, call_id="call_write")]


registrations = [
    AgentRegistration(
        name="marker",
        build=lambda: Agent(
            name="marker", instructions="Mark, then read.", tools=[write_mark, read_mark, check_mark]
        ),
        scripted_model=MarkScript,
    ),
    AgentRegistration(
        name="lingerer",
        build=lambda: Agent(name="lingerer", instructions="Mark, then linger.", tools=[write_mark, linger]),
        scripted_model=LingerScript,
    ),
]
