"""Telemetry: logs (structlog), metrics (Prometheus), traces (OpenTelemetry), set up once at the edge."""

from agent_worker.telemetry.logs import configure_logging
from agent_worker.telemetry.tracing import configure_tracing, tracing_interceptors

__all__ = ["configure_logging", "configure_tracing", "tracing_interceptors"]
