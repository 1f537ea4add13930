"""An agent's own read tools, their outputs bounded on the way to the model.

A read tool (a plain ``@function_tool``, no effect declaration) runs inside the turn, and what it
returns goes into the model's next input and the stored conversation as it is: a tool that reads a
20,000,000-character file would send all of it. ``bounded_agent`` gives every read function tool of
the agent and of the agents its handoffs reach the same bound as every other tool output
(``activities.tools.results.bounded_read``): up
to ``OUTPUT_PREVIEW_CHARS`` characters the output is untouched (its type too); past that, the model
reads the head and a note naming the whole's size and digest, and the whole is kept in the task's
artifact store (the call's ``ToolCallRecord`` names that digest).

What is bounded is the text the model would read: a string as it is, any other plain value as the
SDK turns it into text (``str``), a ``ToolOutputText`` by its text. Left as they are: structured
content (images, files, lists of content items), whose text form is not what the model reads, and
tools with a declared output schema (``output_type``/``output_json_schema``: the SDK checks their
output against it). Outside a turn (the agent run directly with ``Runner``) nothing is bounded.

Like ``durable_agent``, the registration's agents stay as they were: agents with read tools are
copied, and handoffs are pointed at the copies.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any

from agent_worker.activities.agent.registry import agent_graph, handoff_target
from agent_worker.activities.agent.tools import effect_of, running_turn
from agent_worker.activities.tools.results import OUTPUT_PREVIEW_CHARS, bounded_read
from agents import Agent, FunctionTool, Handoff, ToolOutputText
from agents.items import ItemHelpers
from agents.tool_context import ToolContext

_BOUNDED_ATTR = "_agent_worker_bounded"


def bounded_agent(agent: Agent[Any]) -> Agent[Any]:
    """``agent`` with every read function tool of its graph (``agent_graph``) bounded
    (``bounded_tool``). A graph without one is returned as it is."""
    graph = agent_graph(agent)
    if not any(_unbounded(tool) for a in graph for tool in a.tools):
        return agent
    copies = {id(a): a.clone(tools=[bounded_tool(tool) for tool in a.tools]) for a in graph}
    for original in graph:
        copies[id(original)].handoffs = [_handoff(item, copies) for item in original.handoffs]
    return copies[id(agent)]


def bounded_tool(tool: Any) -> Any:
    """A copy of the read function tool ``tool`` whose output the model reads bounded; any other
    tool (an effect, one already bounded, one with an output schema) as it is."""
    if not _unbounded(tool):
        return tool
    bounded: FunctionTool = copy.copy(tool)  # FunctionTool.__copy__ rebinds the invoker to the copy
    invoke = bounded.on_invoke_tool

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        return await _bounded_result(ctx, await invoke(ctx, arguments))

    bounded.on_invoke_tool = on_invoke_tool
    setattr(bounded, _BOUNDED_ATTR, True)
    return bounded


def _unbounded(tool: Any) -> bool:
    return (
        isinstance(tool, FunctionTool)
        and effect_of(tool) is None
        and not getattr(tool, _BOUNDED_ATTR, False)
        and tool.output_json_schema is None
    )


async def _bounded_result(ctx: ToolContext[Any], output: Any) -> Any:
    """``output`` as the model may read it (see the module docstring)."""
    services = running_turn()
    if services is None:
        return output
    if isinstance(output, ToolOutputText):
        text = output.text
    elif isinstance(output, str):
        text = output
    else:
        converted = ItemHelpers._convert_tool_output(output)  # the text the SDK would send
        if not isinstance(converted, str):
            return output  # structured content
        text = converted
    if len(text) <= OUTPUT_PREVIEW_CHARS:
        return output
    call_id = getattr(ctx, "tool_call_id", None)
    return await bounded_read(services.store, text, call_id, services.whole_outputs)


def _handoff(item: Any, copies: dict[int, Agent[Any]]) -> Any:
    """A handoff entry pointing at the copies: an agent by its copy; a ``Handoff`` (``handoff()``)
    by a copy that runs the original (its callbacks and input checks) and hands to the copy."""
    if isinstance(item, Agent):
        return copies[id(item)]
    target = handoff_target(item)
    if not isinstance(item, Handoff) or id(target) not in copies:
        return item
    replacement = copies[id(target)]
    invoke = item.on_invoke_handoff

    async def on_invoke_handoff(context: Any, arguments: str) -> Any:
        await invoke(context, arguments)
        return replacement

    redirected = copy.copy(item)
    redirected.on_invoke_handoff = on_invoke_handoff
    redirected._agent_ref = weakref.ref(replacement)
    return redirected


__all__ = ["bounded_agent", "bounded_tool"]
