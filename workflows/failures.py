"""What a failed activity or child says: its error type (the code our activities raise with) and its
message. Workflow code."""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError


def failure_message(err: ActivityError | ChildWorkflowError) -> str:
    """The message of the failure's cause (the activity's own words), else the failure itself."""
    cause: Any = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


def failure_code(err: ActivityError) -> str | None:
    """The error type of the failure's cause (``write_unknown``, ``sandbox_missing``, ...)."""
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None


def failure_operation(err: ActivityError) -> str | None:
    """The operation the failure's cause names (``sandbox.create``, ...; ``activities.errors``)."""
    return failure_detail(err, "operation")


def failure_detail(err: ActivityError, key: str) -> str | None:
    """One field of the details the failure's cause carries (``activities.errors``), if any."""
    return failure_details(err).get(key) or None


def failure_details(err: ActivityError | ChildWorkflowError) -> dict[str, Any]:
    """The details the failure's cause carries (an activity's fields, a failed task's usage), or {}."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], dict):
        return cause.details[0]
    return {}


def as_activity_error(err: ApplicationError, activity_type: str) -> ActivityError:
    """``err``, raised by a local activity as itself, as the ``ActivityError`` an activity's failure
    comes as (its cause), so that one handler reads both."""
    wrapped = ActivityError(
        f"local activity {activity_type} failed",
        scheduled_event_id=0,
        started_event_id=0,
        identity="",
        activity_type=activity_type,
        activity_id="",
        retry_state=None,
    )
    wrapped.__cause__ = err
    return wrapped
