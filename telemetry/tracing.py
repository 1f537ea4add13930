"""Traces: one OpenTelemetry trace per task, from the client that starts it down to each model call.

Temporal's own spans come from the SDK's ``TracingInterceptor`` on the client (workers made from that
client inherit it): ``StartWorkflow`` on the client, then ``RunWorkflow``, ``StartActivity`` and
``CompleteWorkflow`` from the workflow and ``RunActivity`` around each activity. The span context
travels in Temporal headers, so activities on other workers and hosts join the same trace. The
OpenAI Agents SDK's spans (runs, agents, model calls, tools) are mirrored under the ``agent.turn``
activity's span by :class:`telemetry.agent_spans.AgentSpanMirror`.

Replay exports nothing twice: workflow spans are created only for code that runs for the first time,
and the tracer provider is the SDK's replay-safe one (span ids drawn from the workflow's seeded random,
spans never ended while history replays).

The OpenTelemetry packages are the ``otel`` extra, imported only when tracing is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import TracerProvider
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider, TracingInterceptor

INSTALL_HINT = "tracing needs the otel extra: pip install 'agent-worker[otel]'"
_OTLP_TRACES_PATH = "/v1/traces"


def tracing_interceptors(provider: TracerProvider | None) -> list[TracingInterceptor]:
    """The interceptors that trace Temporal calls with ``provider``, for ``Client.connect`` (workers
    made from that client inherit them; a ``Replayer`` takes them too).

    Args:
        provider: From :func:`configure_tracing`; ``None`` (tracing off) gives no interceptors.

    Returns:
        The SDK's ``TracingInterceptor`` on a tracer from ``provider``, or an empty list.
    """
    if provider is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(provider.get_tracer(__name__))]


def configure_tracing(
    *,
    endpoint: str | None,
    service_name: str = "agent-worker",
    exporter: SpanExporter | None = None,
    agents_to_openai: bool = False,
) -> ReplaySafeTracerProvider | None:
    """The replay-safe tracer provider for this process, exporting in batches; ``None`` when off.

    Also turns the OpenAI Agents SDK's tracing on and routes its spans into the provider. The SDK's
    default processor (an exporter to OpenAI's trace dashboard) is replaced unless
    ``agents_to_openai``. The Agents SDK's tracing is process-wide, so call this once, at start.

    Args:
        endpoint: An OTLP/HTTP collector's base URL (like ``OTEL_EXPORTER_OTLP_ENDPOINT``, e.g.
            ``http://localhost:4318``); ``/v1/traces`` is added unless present.
        service_name: The ``service.name`` resource attribute.
        exporter: Another span exporter to batch spans to (tests pass an in-memory one and call
            ``force_flush()`` before reading it).
        agents_to_openai: Keep exporting Agents SDK traces to OpenAI too.

    Returns:
        The provider (shut it down at exit to flush the last batch), or ``None`` when neither
        ``endpoint`` nor ``exporter`` is given: tracing is off and costs nothing.

    Raises:
        ImportError: the ``otel`` extra is not installed.
    """
    if endpoint is None and exporter is None:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from temporalio.contrib.opentelemetry import create_tracer_provider
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err

    exporters: list[SpanExporter] = []
    if endpoint is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter(endpoint=_traces_url(endpoint)))
    if exporter is not None:
        exporters.append(exporter)
    provider = create_tracer_provider(resource=Resource.create({"service.name": service_name}))
    for each in exporters:
        provider.add_span_processor(BatchSpanProcessor(each))
    _route_agent_spans(provider, agents_to_openai=agents_to_openai)
    return provider


def _route_agent_spans(provider: ReplaySafeTracerProvider, *, agents_to_openai: bool) -> None:
    from agent_worker.telemetry.agent_spans import AgentSpanMirror
    from agents.tracing import add_trace_processor, set_trace_processors, set_tracing_disabled

    mirror = AgentSpanMirror(provider.get_tracer("agent_worker.telemetry.agent_spans"))
    if agents_to_openai:
        add_trace_processor(mirror)
    else:
        set_trace_processors([mirror])
    set_tracing_disabled(False)


def _traces_url(endpoint: str) -> str:
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(_OTLP_TRACES_PATH) else endpoint + _OTLP_TRACES_PATH


__all__ = ["configure_tracing", "tracing_interceptors"]
