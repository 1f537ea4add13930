"""The OpenAI Agents SDK's own spans, mirrored as OpenTelemetry spans.

The Agents SDK traces a ``Runner.run`` through its own processors (by default, an exporter to
OpenAI). :class:`AgentSpanMirror` is such a processor: each SDK span becomes an OpenTelemetry span
with the same parent/child shape, and a run's top spans hang under the OpenTelemetry span that was
current when the run started (inside an activity, the activity's ``RunActivity`` span), so one task
reads as one trace from the client's start down to each model call and tool.

Names and attributes follow the OpenTelemetry GenAI conventions where one applies:

=================  ==========================  ==================================================
SDK span           OpenTelemetry span          attributes
=================  ==========================  ==================================================
task (one run)     ``agents.run``              workflow name, token usage
agent              ``invoke_agent {agent}``    ``gen_ai.agent.name``
turn               ``agents.turn``             turn number, agent, usage of its model call
generation         ``chat {model}``            ``gen_ai.request.model``, token usage
response           ``chat {model}``            ``gen_ai.response.model``, response id, usage
function (tool)    ``execute_tool {tool}``     ``gen_ai.tool.name``
others             ``agents.{type}``           the SDK span's name, if it has one
=================  ==========================  ==================================================

Prompts, model output and tool arguments are never copied: they may hold anything a task handles.
"""

from __future__ import annotations

import threading
from typing import Any

import opentelemetry.context
import opentelemetry.trace
from agents.tracing import Span as AgentSpan
from agents.tracing import Trace, TracingProcessor
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

_MODEL_CALLS = frozenset({"generation", "response"})


class AgentSpanMirror(TracingProcessor):
    """An Agents SDK trace processor that re-creates each SDK span as an OpenTelemetry span.

    Args:
        tracer: Where the spans are made (a replay-safe tracer from the task's tracer provider).
    """

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._lock = threading.Lock()
        # The OpenTelemetry context each SDK trace (one run) started in: its top spans' parent.
        self._run_contexts: dict[str, Context] = {}
        # Open mirrors by SDK span id, with the SDK trace id they belong to.
        self._open: dict[str, tuple[str, Span]] = {}

    def on_trace_start(self, trace: Trace) -> None:
        with self._lock:
            self._run_contexts[trace.trace_id] = opentelemetry.context.get_current()

    def on_trace_end(self, trace: Trace) -> None:
        with self._lock:
            self._run_contexts.pop(trace.trace_id, None)
            # The SDK finishes its spans in ``finally`` blocks; anything left open would leak.
            leftovers = [sid for sid, (tid, _) in self._open.items() if tid == trace.trace_id]
            spans = [self._open.pop(sid)[1] for sid in leftovers]
        for span in spans:
            span.end()

    def on_span_start(self, span: AgentSpan[Any]) -> None:
        with self._lock:
            parent = self._open.get(span.parent_id) if span.parent_id else None
            if parent is not None:
                context = opentelemetry.trace.set_span_in_context(parent[1])
            else:
                context = self._run_contexts.get(span.trace_id) or opentelemetry.context.get_current()
        name, attributes = _describe(span)
        kind = SpanKind.CLIENT if span.span_data.type in _MODEL_CALLS else SpanKind.INTERNAL
        mirror = self._tracer.start_span(name, context=context, kind=kind, attributes=attributes)
        with self._lock:
            self._open[span.span_id] = (span.trace_id, mirror)

    def on_span_end(self, span: AgentSpan[Any]) -> None:
        with self._lock:
            entry = self._open.pop(span.span_id, None)
        if entry is None:
            return
        mirror = entry[1]
        # Models, usage and tool lists are filled in while the SDK span runs: describe it again.
        name, attributes = _describe(span)
        mirror.update_name(name)
        mirror.set_attributes(attributes)
        if span.error:
            mirror.set_status(Status(StatusCode.ERROR, str(span.error.get("message") or "error")))
        mirror.end()

    def shutdown(self) -> None:
        """Nothing to do: the tracer provider owns export and is shut down by its owner."""

    def force_flush(self) -> None:
        """Nothing to do: spans go to the tracer provider's processors as they end."""


def _describe(span: AgentSpan[Any]) -> tuple[str, dict[str, AttributeValue]]:
    """The OpenTelemetry name and attributes of an SDK span, as far as it is known now."""
    data = span.span_data
    kind: str = data.type
    attributes: dict[str, AttributeValue] = {"agents.span_type": kind}
    if kind == "task":
        name = "agents.run"
        attributes["agents.workflow_name"] = data.name
        _add_usage(attributes, data.usage)
    elif kind == "agent":
        name = f"invoke_agent {data.name}"
        attributes.update({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": data.name})
        if data.tools:
            attributes["agents.tools"] = list(data.tools)
    elif kind == "turn":
        name = "agents.turn"
        attributes.update({"agents.turn": data.turn, "gen_ai.agent.name": data.agent_name})
        _add_usage(attributes, data.usage)
    elif kind == "generation":
        name = f"chat {data.model}" if data.model else "chat"
        attributes["gen_ai.operation.name"] = "chat"
        if data.model:
            attributes["gen_ai.request.model"] = data.model
        _add_usage(attributes, data.usage)
    elif kind == "response":
        response = data.response
        model = getattr(response, "model", None)
        name = f"chat {model}" if model else "chat"
        attributes["gen_ai.operation.name"] = "chat"
        if model:
            attributes["gen_ai.response.model"] = model
        response_id = getattr(response, "id", None) or data.export().get("response_id")
        if response_id:
            attributes["gen_ai.response.id"] = response_id
        usage = data.usage
        if usage is None and getattr(response, "usage", None) is not None:
            usage = response.usage.model_dump()
        _add_usage(attributes, usage)
    elif kind == "function":
        name = f"execute_tool {data.name}"
        attributes.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": data.name})
    else:
        name = f"agents.{kind}"
        if isinstance(getattr(data, "name", None), str):
            attributes["agents.name"] = data.name
    return name, attributes


def _add_usage(attributes: dict[str, AttributeValue], usage: dict[str, Any] | None) -> None:
    if not usage:
        return
    for key in ("input_tokens", "output_tokens"):
        value = usage.get(key)
        if isinstance(value, int):
            attributes[f"gen_ai.usage.{key}"] = value


__all__ = ["AgentSpanMirror"]
