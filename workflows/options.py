"""Timeouts and retry policies of every activity the workflow runs, in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType


@dataclass(frozen=True)
class ActivityOptions:
    """Keyword arguments for ``workflow.execute_activity_method``."""

    start_to_close: timedelta
    retry: RetryPolicy
    heartbeat: timedelta | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def kwargs(self, start_to_close: timedelta | None = None) -> dict[str, Any]:
        """The options as keyword arguments, optionally with a longer start-to-close timeout."""
        options: dict[str, Any] = {
            "start_to_close_timeout": start_to_close or self.start_to_close,
            "retry_policy": self.retry,
            **self.extra,
        }
        if self.heartbeat is not None:
            options["heartbeat_timeout"] = self.heartbeat
        return options


def _retry(attempts: int, *, max_interval: float = 30.0) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=max_interval),
        maximum_attempts=attempts,
    )


# A turn repeats its in-flight model call when retried; completed calls are not repeated (journal).
# Turns heartbeat every 2 s, so a dead worker is noticed within the heartbeat timeout.
TURN = ActivityOptions(timedelta(minutes=10), _retry(5), heartbeat=timedelta(seconds=10))
PLAN = ActivityOptions(timedelta(seconds=30), _retry(3))
INGEST = ActivityOptions(timedelta(minutes=2), _retry(5))
SANDBOX_CREATE = ActivityOptions(timedelta(minutes=5), _retry(5))
# Waiting for cancellation to complete means the command really is killed before the workflow moves on.
SANDBOX_EXEC = ActivityOptions(
    timedelta(minutes=2),
    _retry(3),
    heartbeat=timedelta(seconds=10),
    extra={"cancellation_type": ActivityCancellationType.WAIT_CANCELLATION_COMPLETED},
)
SANDBOX_DESTROY = ActivityOptions(timedelta(minutes=2), _retry(10))
# Writes are safe to retry: the operation key makes a repeat return the first receipt.
BUSINESS_WRITE = ActivityOptions(timedelta(seconds=60), _retry(10))
BUSINESS_LOOKUP = ActivityOptions(timedelta(seconds=30), _retry(10))
EXEC_GRACE = timedelta(seconds=30)
