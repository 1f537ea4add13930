"""Telemetry: logs (structlog), metrics (Prometheus), traces (OpenTelemetry), set up once at the edge."""

from telemetry.logs import configure_logging
from telemetry.tracing import configure_tracing, tracing_interceptors

__all__ = ["configure_logging", "configure_tracing", "tracing_interceptors"]
