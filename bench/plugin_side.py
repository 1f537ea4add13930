"""The official integration's side of benchmark 2: the same scripted agent through
``temporalio.openai_agents`` (package ``temporalio-openai-agents``).

It runs in the plugin's own virtual environment (``bench.plugin_venv``), because the plugin pins an
older openai-agents than agent-worker. It imports nothing from this project but ``bench.script``
(the shared, dependency-free script), so both sides get the same model responses.

The agent runs in the workflow, as the plugin intends: every model call is an activity that carries
the conversation so far, and the shell tool is an activity (``activity_as_tool``) running the same
command in a subprocess, as agent-worker's process sandbox does.

Run (by ``bench.vs_plugin``): ``PYTHON -m bench.plugin_side --address HOST:PORT --turns 40 [--rounds 1]``.
Prints one JSON object: per run, the wall time, history events and bytes, and the answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from importlib.metadata import version
from typing import Any

from agents import Agent, Model, ModelResponse, Runner, Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench import script
    from bench.script import run_shell as shell  # the tool's parameter is named script
from temporalio.openai_agents.workflow import activity_as_tool

TOOL_TIMEOUT = timedelta(minutes=2)


class ScriptModel(Model):
    """The shared script as an Agents SDK model (the plugin runs it inside its model activity)."""

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any):
        items = script.conversation(input)
        move = script.next_move(items)
        if move.text is not None:
            output: Any = ResponseOutputMessage(
                id="",
                content=[ResponseOutputText(text=move.text, annotations=[], type="output_text")],
                role="assistant",
                status="completed",
                type="message",
            )
        else:
            output = ResponseFunctionToolCall(
                arguments=json.dumps(move.arguments),
                call_id=move.call_id or "",
                name=script.TOOL,
                type="function_call",
                id=move.call_id,
                status="completed",
            )
        input_tokens = len(json.dumps(items)) // 4
        output_tokens = len(output.model_dump_json()) // 4
        usage = Usage(
            requests=1,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=input_tokens + output_tokens,
        )
        return ModelResponse(output=[output], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


@activity.defn(name=script.TOOL)
async def run_shell(script: str) -> str:
    """Run a shell script.

    Args:
        script: The script, run by sh -c.
    """
    return await shell(script)


@workflow.defn(name="PluginCounter")
class PluginCounter:
    """The agent, run in the workflow by the plugin's runner."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="counter",
            instructions="Run what you are asked.",
            tools=[activity_as_tool(run_shell, start_to_close_timeout=TOOL_TIMEOUT)],
        )
        result = await Runner.run(agent, prompt, max_turns=100_000)
        return str(result.final_output)


async def main(address: str, turns: list[int], rounds: int) -> dict[str, Any]:
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.openai_agents.testing import TestModelProvider

    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(minutes=2)),
        model_provider=TestModelProvider(ScriptModel()),
    )
    client = await Client.connect(address, plugins=[plugin])
    queue = f"plugin-{uuid.uuid4().hex[:8]}"
    runs = []
    async with Worker(client, task_queue=queue, workflows=[PluginCounter], activities=[run_shell]):
        await client.execute_workflow(  # warm the worker (imports, caches)
            PluginCounter.run, "count to 1", id=f"plugin-warm-{queue}", task_queue=queue
        )
        for _ in range(rounds):
            for n in turns:
                workflow_id = f"plugin-{n}-{uuid.uuid4().hex[:6]}"
                started = time.perf_counter()
                answer = await client.execute_workflow(
                    PluginCounter.run, f"count to {n}", id=workflow_id, task_queue=queue
                )
                seconds = time.perf_counter() - started
                info = (await client.get_workflow_handle(workflow_id).describe()).raw_description
                execution = info.workflow_execution_info
                runs.append(
                    {
                        "turns": n,
                        "seconds": seconds,
                        "events": execution.history_length,
                        "bytes": execution.history_size_bytes,
                        "answer": answer,
                        "workflow_id": workflow_id,
                    }
                )
    versions = {
        name: version(name) for name in ("temporalio-openai-agents", "openai-agents", "temporalio", "openai")
    }
    return {"runs": runs, "versions": versions, "python": sys.executable}


if __name__ == "__main__":
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no key here; agent-worker's side is off too
    parser = argparse.ArgumentParser(description="Run the scripted agent through the official plugin.")
    parser.add_argument("--address", required=True)
    parser.add_argument("--turns", required=True, help="comma-separated turn counts")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    result = asyncio.run(main(args.address, [int(t) for t in args.turns.split(",")], args.rounds))
    print(json.dumps(result))
