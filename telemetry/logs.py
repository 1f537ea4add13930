"""Readable logs for people (console) and JSON lines for machines, through structlog, on stderr.

Every line an activity writes carries the task id, run id, activity type and attempt
(``activities.errors.activity_boundary`` binds them); workflow logs come through the SDK's
replay-safe ``workflow.logger`` and are silent during replay.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from schemas.config import WorkerConfig


def configure_logging(config: WorkerConfig) -> None:
    """structlog for people (console) or machines (JSON), on stderr so stdout stays for command
    output; stdlib logs (the SDK's) go through it."""
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if config.log_format == "json"
        # Plain tracebacks: a rich one prints every local (huge run states, maybe secrets).
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.log_level.upper())


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of each record."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass
