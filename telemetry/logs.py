"""Readable logs for people (console) and JSON lines for machines, through structlog, on stderr.

Every line an activity writes carries the task id, run id, activity type and attempt
(``activities.errors.activity_boundary`` binds them); workflow logs come through the SDK's
replay-safe ``workflow.logger`` and are silent during replay.

No secret is written: every line, its exception text included, passes through
``security.redact.redact`` right before it is rendered (``redact_secrets``), and the rendered line
once more as it is written.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog
from agent_worker.schemas.config import WorkerConfig
from agent_worker.security.redact import redact, redact_value


def redact_secrets(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: every string in the event (message, fields, formatted exception) redacted."""
    return {key: redact_value(value) for key, value in event_dict.items()}


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
                # Tracebacks become text here, so that redaction sees them before the renderer does.
                structlog.processors.format_exc_info,
                redact_secrets,
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

    def format(self, record: logging.LogRecord) -> str:
        # The last gate: whatever a renderer added (escaped or not) is scrubbed once more.
        return redact(super().format(record))
