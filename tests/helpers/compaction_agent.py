"""An agent that needs many turns and a model server with a context limit, for compaction tests.

The agent counts steps: each turn it runs ``echo step N`` (padded, so the conversation grows) in the
sandbox, one command per turn, until 'count N steps' is reached. Where it is depends only on what it
sees: the step numbers in its tool outputs, or in the summary of a compacted conversation ("done
through step K"). So it finishes only if compaction keeps the progress the older items held.

``LimitedStub`` is the project's OpenAI-compatible stub answering with that logic, refusing (HTTP
400 ``context_length_exceeded``, as OpenAI does) any request over its token limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent_worker.activities.agent import AgentRegistration, ConversationModel
from agent_worker.activities.agent.compaction import CHARS_PER_TOKEN, INSTRUCTIONS
from agents import Agent
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

from tests.helpers.agents import run_shell
from tests.helpers.openai_stub import OpenAIStub, RecordedRequest, Reply, error_json, response_json

# Each step's command prints this many characters besides its number.
PADDING = 300
# The agents' budgets, in estimated tokens; the stub refuses requests over twice that.
BUDGET = 1_500

_DONE = re.compile(r"done through step (\d+)")
_STEP = re.compile(r"\bstep (\d+)\b")


def next_move(instructions: str | None, items: list[dict[str, Any]]) -> tuple[str, Any]:
    """What the step counter does next: ``("summary", text)`` when asked to compact,
    ``("call", n)`` to run step n, ``("final", text)`` when done."""
    if instructions == INSTRUCTIONS:
        text = json.dumps(items)
        done = max((int(n) for n in _STEP.findall(text) + _DONE.findall(text)), default=0)
        return "summary", f"The agent counts steps; done through step {done}."
    prompt = str(items[0].get("content", "")) if items else ""
    target = int(m.group(1)) if (m := re.search(r"count (\d+) steps", prompt)) else 3
    done = 0
    for item in items:
        if item.get("type") == "function_call_output":
            done = max([done, *(int(n) for n in _STEP.findall(str(item.get("output", ""))))])
        elif item.get("role") == "user" and item is not items[0]:
            done = max([done, *(int(n) for n in _DONE.findall(str(item.get("content", ""))))])
    if done < target:
        return "call", done + 1
    return "final", f"counted {done} steps"


def step_script(n: int) -> str:
    return f"echo step {n}; head -c {PADDING} /dev/zero | tr '\\0' x"


class StepScript(ConversationModel):
    """``next_move`` as a scripted model; ``calls`` counts the calls it really answered."""

    calls: list[str] = []  # noqa: RUF012 (shared on purpose: the test reads it)

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        kind, value = next_move(instructions, items)
        StepScript.calls.append(kind)
        if kind == "call":
            return [function_call("run_shell", {"script": step_script(value)}, call_id=f"call_step_{value}")]
        return [assistant_message(value)]


def _agent(name: str) -> Agent:
    return Agent(name=name, instructions="Count the steps, one command a turn.", tools=[run_shell])


registrations = [
    AgentRegistration(
        name="step-counter",
        build=lambda: _agent("step-counter"),
        scripted_model=StepScript,
        compact_after_tokens=BUDGET,
    ),
    # No budget of its own: the worker's compact_after_tokens applies.
    AgentRegistration(
        name="step-counter-default", build=lambda: _agent("step-counter-default"), scripted_model=StepScript
    ),
    # Its model is the worker's OpenAI-compatible server (the test points it at LimitedStub).
    AgentRegistration(
        name="step-counter-http",
        build=lambda: _agent("step-counter-http"),
        compact_after_tokens=BUDGET,
        max_model_calls=3,
    ),
]


def request_tokens(body: Any) -> int:
    """A request's tokens as the stub counts them: 4 characters a token of its instructions and
    input (or messages)."""
    if not isinstance(body, dict):
        return 0
    items = body.get("input", body.get("messages"))
    return (len(str(body.get("instructions") or "")) + len(json.dumps(items))) // CHARS_PER_TOKEN


class LimitedStub(OpenAIStub):
    """The stub answering Responses requests with ``next_move``, refusing any over ``max_tokens``."""

    def __init__(self, max_tokens: int) -> None:
        super().__init__()
        self.max_tokens = max_tokens
        self.refused = 0
        self.largest = 0

    def _next(self, method: str, path: str, body: Any) -> Reply:
        if method != "POST" or path != "/v1/responses" or not isinstance(body, dict):
            return super()._next(method, path, body)
        with self._lock:
            self.requests.append(RecordedRequest(method, path, 0.0, None))
            tokens = request_tokens(body)
            self.largest = max(self.largest, tokens)
            if tokens > self.max_tokens:
                self.refused += 1
                message = (
                    f"This model's maximum context length is {self.max_tokens} tokens. However, your "
                    f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
                )
                return Reply(400, {}, error_json(message, code="context_length_exceeded"))
        raw = body.get("input")
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
        kind, value = next_move(body.get("instructions"), items)
        if kind != "call":
            return Reply(200, {}, response_json(value, model=str(body.get("model", "gpt-test"))))
        reply = response_json("", model=str(body.get("model", "gpt-test")))
        reply["output"] = [
            {
                "id": f"fc_{value}",
                "type": "function_call",
                "call_id": f"call_step_{value}",
                "name": "run_shell",
                "arguments": json.dumps({"script": step_script(value)}),
                "status": "completed",
            }
        ]
        return Reply(200, {}, reply)


__all__ = ["BUDGET", "LimitedStub", "StepScript", "next_move", "registrations", "request_tokens"]
