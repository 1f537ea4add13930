"""Classification of model-provider failures, so that Temporal alone decides when a model call repeats.

Policy, for errors of the ``openai`` client as they leave ``Runner.run`` (the OpenAI Responses model
re-raises them unchanged; wrappers are unwrapped through ``__cause__``):

==========================================  ==================================  =============
failure                                     ``ApplicationError.type``           retried
==========================================  ==================================  =============
HTTP 408, 409, 429, 5xx                     ``model_provider_retryable``        yes
other HTTP 4xx                              ``model_provider_rejected``         no
any status with ``x-should-retry: false``   ``model_provider_rejected``         no
any status with ``x-should-retry: true``    ``model_provider_retryable``        yes
connection error, client or SDK timeout     ``model_provider_unavailable``      yes
anything else                               ``None``: the caller decides
==========================================  ==================================  =============

A 400 to a streamed request is first sent again unstreamed, once, in case the server does not
stream (``activities.agent.streaming``); the table applies to the answer of that request.

A retryable reply carrying ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date) sets
``next_retry_delay``, which replaces the retry policy's backoff for that one retry (capped at
``MAX_RETRY_AFTER``). ``x-should-retry`` is the OpenAI API's own override, which the ``openai``
client obeys too.

Nothing below Temporal retries: the client is built with ``max_retries=0`` and the Agents SDK's
runner-managed retries are off unless ``ModelSettings.retry`` enables them, so the worst-case number
of HTTP attempts per model call equals the ``maximum_attempts`` of the turn activity's retry policy
(``workflows.options.TURN``); a retried turn repeats only its in-flight model call. One SDK retry is
on by default: a 400 ``conversation_locked`` is re-sent up to three more times within one attempt.
Running with ``RunConfig(model_settings=no_sdk_retries())`` turns that off as well.

A provider's words can quote the request's credentials (``Incorrect API key provided: sk-...``):
the message is redacted (``security.redact``) before it becomes an ``ApplicationError``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import openai
from agent_worker.security.redact import redact, redact_value
from agents import ModelRetrySettings, ModelSettings
from agents.exceptions import ModelTimeoutError
from temporalio.exceptions import ApplicationError

RETRYABLE = "model_provider_retryable"
REJECTED = "model_provider_rejected"
UNAVAILABLE = "model_provider_unavailable"

# A longer server-requested wait is clamped, so a bogus header cannot park a task for days.
MAX_RETRY_AFTER = timedelta(minutes=10)

_RETRYABLE_STATUSES = frozenset({408, 409, 429})
_OPERATION = "model.call"


def provider_failure(err: BaseException) -> ApplicationError | None:
    """The ``ApplicationError`` a failed model call becomes, or ``None`` if it is no provider failure.

    Args:
        err: what ``Runner.run`` (or a model's ``get_response``) raised.

    Returns:
        A retryable or non-retryable ``ApplicationError`` whose ``type`` is one of ``RETRYABLE``,
        ``REJECTED`` or ``UNAVAILABLE`` and whose first detail is a dict with the status code;
        ``None`` for errors that are not the provider's (the caller decides).
    """
    cause = _provider_cause(err)
    if isinstance(cause, openai.APIStatusError):
        return _status_failure(cause)
    if isinstance(cause, openai.APIConnectionError | ModelTimeoutError):
        # APITimeoutError is an APIConnectionError; ModelTimeoutError is ModelSettings.timeout.
        reason = (
            f"{cause} ({type(cause.__cause__).__name__}: {cause.__cause__})" if cause.__cause__ else cause
        )
        return _failure(UNAVAILABLE, f"model provider unavailable: {reason}", status=None, retryable=True)
    return None


def no_sdk_retries() -> ModelSettings:
    """Model settings that switch off every retry the Agents SDK would make on its own.

    Pass as ``RunConfig(model_settings=no_sdk_retries())``: an explicit ``max_retries=0`` also
    disables the SDK's default re-sending of ``conversation_locked`` replies.
    """
    return ModelSettings(retry=ModelRetrySettings(max_retries=0))


def _provider_cause(err: BaseException) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, openai.APIStatusError | openai.APIConnectionError | ModelTimeoutError):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


# A 429 for exhausted quota or billing will not pass by waiting: fail at once, explained.
_NEVER_RETRY_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


def _status_failure(err: openai.APIStatusError) -> ApplicationError:
    status = err.status_code
    should_retry = (err.response.headers.get("x-should-retry") or "").strip().lower()
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    elif err.code in _NEVER_RETRY_CODES:
        retryable = False
    else:
        retryable = status in _RETRYABLE_STATUSES or status >= 500
    message = _provider_message(err)
    if not retryable:
        return _failure(
            REJECTED,
            f"model provider rejected the request: HTTP {status}: {message}",
            status=status,
            retryable=False,
            err=err,
        )
    return _failure(
        RETRYABLE,
        f"model provider failed: HTTP {status}: {message}",
        status=status,
        retryable=True,
        err=err,
        delay=_retry_after(err.response.headers),
    )


def _failure(
    code: str,
    message: str,
    *,
    status: int | None,
    retryable: bool,
    err: openai.APIStatusError | None = None,
    delay: timedelta | None = None,
) -> ApplicationError:
    details: dict[str, Any] = redact_value(
        {
            "code": code,
            "operation": _OPERATION,
            "retryable": "yes" if retryable else "no",
            "status_code": status,
            "provider_code": err.code if err is not None else None,
            "request_id": err.request_id if err is not None else None,
        }
    )
    return ApplicationError(
        redact(message), details, type=code, non_retryable=not retryable, next_retry_delay=delay
    )


def _provider_message(err: openai.APIStatusError) -> str:
    # The client keeps the body's "error" object as ``body``; its message is the provider's words.
    body = err.body
    if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"]:
        return body["message"]
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return err.message


def _retry_after(headers: Any) -> timedelta | None:
    """The wait the provider asked for: ``retry-after-ms``, else ``retry-after`` in seconds or as a date."""
    seconds: float | None = None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        seconds = _number(raw_ms, scale=0.001)
    raw = headers.get("retry-after")
    if seconds is None and raw is not None:
        seconds = _number(raw, scale=1.0)
        if seconds is None:
            seconds = _seconds_until(raw)
    if seconds is None or seconds <= 0:
        return None
    return timedelta(seconds=min(seconds, MAX_RETRY_AFTER.total_seconds()))


def _number(raw: str, *, scale: float) -> float | None:
    try:
        value = float(raw) * scale
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _seconds_until(raw: str) -> float | None:
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


__all__ = ["MAX_RETRY_AFTER", "REJECTED", "RETRYABLE", "UNAVAILABLE", "no_sdk_retries", "provider_failure"]
