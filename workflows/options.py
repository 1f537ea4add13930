"""Timeouts and retry policies of every activity the workflow runs, in one place."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

BUSINESS_QUEUE_SUFFIX = ".business"
# Worker roles each poll a queue of their own (``agent-worker worker --role``): workflows and light
# activities on the task queue itself, agent turns on ``.agent``, sandbox commands on ``.sandbox``,
# business writes on ``.business``. Runs begun before the split keep their activities on the task
# queue until their next new step (the change is guarded by this patch).
AGENT_QUEUE_SUFFIX = ".agent"
SANDBOX_QUEUE_SUFFIX = ".sandbox"
ROLE_QUEUES_PATCH = "role-queues"
# Every activity heartbeats every 2 s (activities.errors.activity_boundary): a worker that dies is
# noticed, and its work retried elsewhere, within this.
HEARTBEAT = timedelta(seconds=10)


@dataclass(frozen=True)
class ActivityOptions:
    """Keyword arguments for ``workflow.execute_activity_method``."""

    start_to_close: timedelta
    retry: RetryPolicy
    heartbeat: timedelta | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def kwargs(
        self,
        start_to_close: timedelta | None = None,
        task_queue: str | None = None,
        final_errors: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """The options as keyword arguments, optionally with a longer start-to-close timeout, on
        another task queue, or with more error types that are not retried (``final_errors``)."""
        retry = self.retry
        if final_errors:
            retry = replace(
                retry, non_retryable_error_types=[*(retry.non_retryable_error_types or ()), *final_errors]
            )
        options: dict[str, Any] = {
            "start_to_close_timeout": start_to_close or self.start_to_close,
            "retry_policy": retry,
            **self.extra,
        }
        if task_queue is not None:
            options["task_queue"] = task_queue
        if self.heartbeat is not None:
            options["heartbeat_timeout"] = self.heartbeat
        return options

    def local_kwargs(self) -> dict[str, Any]:
        """The options for ``workflow.execute_local_activity_method`` (no heartbeat, no queue: a
        local activity runs in the workflow's worker, its result recorded in one marker)."""
        return {"start_to_close_timeout": self.start_to_close, "retry_policy": self.retry, **self.extra}


def _retry(attempts: int, *, max_interval: float = 30.0) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=max_interval),
        maximum_attempts=attempts,
    )


# A turn repeats its in-flight model call when retried; completed calls are not repeated (journal).
# Turns heartbeat every 2 s, so a dead worker is noticed within the heartbeat timeout.
TURN = ActivityOptions(timedelta(minutes=10), _retry(5), heartbeat=HEARTBEAT)
PLAN = ActivityOptions(timedelta(seconds=30), _retry(3), heartbeat=HEARTBEAT)
INGEST = ActivityOptions(timedelta(minutes=2), _retry(5), heartbeat=HEARTBEAT)
SANDBOX_CREATE = ActivityOptions(timedelta(minutes=5), _retry(5), heartbeat=HEARTBEAT)
# Waiting for cancellation to complete means the command really is killed before the workflow moves on.
SANDBOX_EXEC = ActivityOptions(
    timedelta(minutes=2),
    _retry(3),
    heartbeat=HEARTBEAT,
    extra={"cancellation_type": ActivityCancellationType.WAIT_CANCELLATION_COMPLETED},
)
SANDBOX_DESTROY = ActivityOptions(timedelta(minutes=2), _retry(10), heartbeat=HEARTBEAT)
# A write is retried only when it certainly did not apply (the system was down); a retried attempt
# looks its key up first. An unknown outcome is not retried: the workflow reconciles it by lookup.
BUSINESS_WRITE = ActivityOptions(timedelta(seconds=60), _retry(10), heartbeat=HEARTBEAT)
# Lookups retry within the task's patience (about five minutes), then the task hands off.
BUSINESS_LOOKUP = ActivityOptions(timedelta(seconds=30), _retry(12), heartbeat=HEARTBEAT)
# Confirming writes at completion is evidence gathering: when the system stays down the task
# completes marked evidence-incomplete rather than waiting minutes.
CONFIRM_LOOKUP = ActivityOptions(timedelta(seconds=30), _retry(4, max_interval=5.0), heartbeat=HEARTBEAT)
# Admission is a quick local lookup: a local activity, so a refused start costs no server round trip.
ADMISSION = ActivityOptions(timedelta(seconds=10), _retry(10))
AUTHZ = ActivityOptions(timedelta(seconds=30), _retry(10), heartbeat=HEARTBEAT)
# Event delivery keeps retrying (a sink that is down only delays it); events wait in the state.
EVENTS = ActivityOptions(timedelta(seconds=30), _retry(20, max_interval=60.0), heartbeat=HEARTBEAT)
# Rounds of write, lookup, write again under the same key before a human takes over.
MAX_WRITE_ROUNDS = 5


def agent_queue() -> str | None:
    """The task queue of agent turns (``None``: the workflow's own, for runs before the split)."""
    return _role_queue(AGENT_QUEUE_SUFFIX)


def sandbox_queue() -> str | None:
    """The task queue of sandbox commands (``None``: the workflow's own, for runs before the split)."""
    return _role_queue(SANDBOX_QUEUE_SUFFIX)


def _role_queue(suffix: str) -> str | None:
    if not workflow.patched(ROLE_QUEUES_PATCH):
        return None
    return f"{workflow.info().task_queue}{suffix}"


def business_queue() -> str:
    """The task queue of business writes, lookups and authorization checks: the workflow's own queue
    plus ``.business``, so that only the workers polling it hold business credentials."""
    return f"{workflow.info().task_queue}{BUSINESS_QUEUE_SUFFIX}"


EXEC_GRACE = timedelta(seconds=30)
