"""The package's exceptions, and their translation at the activity boundary.

::

    AgentWorkerError                 root: every error this package raises on purpose
    ├── ArtifactError                the artifact store cannot give back what was asked
    │   ├── ArtifactNotFound         no content under that digest
    │   ├── ArtifactCorrupt          stored bytes no longer match their digest
    │   └── ArtifactUnavailable      the store (object storage, database) cannot be reached: retry
    ├── StateUnavailable             the shared state database (journal, admission, authorizer,
    │                                event sink) cannot be reached or is not migrated: retry
    ├── AgentError                   agents, tools and turns
    │   ├── UnknownAgent             the task names an agent no registration provides
    │   ├── ToolPlanError            a tool's arguments cannot be planned into an operation
    │   ├── TurnError                the turn cannot continue (e.g. a result is missing)
    │   ├── ToolError                an effect tool refuses a call, certainly without an effect
    │   └── McpUnavailable           an MCP server cannot be reached, or refuses the credentials
    ├── SandboxError                 a sandbox operation failed
    ├── NotifyError                  a notifier (webhook, SMTP) did not take a notification
    └── WriteError                   a business write or lookup failed
        ├── WriteConflict            the operation key is taken by a different payload
        ├── WriteUnknown             the request may have been applied (response lost): reconcile
        └── WriteUnavailable         the request was certainly not applied (system down): retry

Each carries a stable ``code``, the ``operation`` it concerns, and ``retryable``: ``"yes"``,
``"no"`` or ``"unknown"``. ``activity_boundary`` turns them into Temporal ``ApplicationError``s in one
place (``activity_boundary``): ``retryable="no"`` becomes non-retryable, everything else is
retried by the activity's retry policy. No secret leaves there: the message, the details and every
cause of what an activity raises go through ``security.redact`` (``redacted_failure``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Literal, ParamSpec, TypeVar

import pydantic
import structlog
from agent_worker.security.redact import redact, redact_value
from temporalio import activity
from temporalio.exceptions import ApplicationError, FailureError

Retryable = Literal["yes", "no", "unknown"]
log = structlog.get_logger("agent_worker.activity")


class AgentWorkerError(Exception):
    """Root of the package's errors."""

    code = "agent_worker_error"
    retryable: Retryable = "unknown"

    def __init__(self, message: str, *, operation: str = "", retryable: Retryable | None = None) -> None:
        super().__init__(message)
        self.operation = operation
        if retryable is not None:
            self.retryable = retryable


class ArtifactError(AgentWorkerError):
    """The artifact store cannot give back what was asked."""

    code = "artifact_error"


class ArtifactNotFound(ArtifactError):
    """No content is stored under the digest."""

    code = "artifact_not_found"
    retryable: Retryable = "no"


class ArtifactCorrupt(ArtifactError):
    """The stored bytes no longer hash to their digest."""

    code = "artifact_corrupt"
    retryable: Retryable = "no"


class ArtifactUnavailable(ArtifactError):
    """The store itself cannot be reached or refuses the request (network, credentials, missing
    bucket or table); nothing was read or written, so the activity is retried."""

    code = "artifact_unavailable"
    retryable: Retryable = "yes"


class StateUnavailable(AgentWorkerError):
    """The shared state database (``state_backend=postgres``) cannot be reached, or lacks its tables.
    Every state operation is idempotent (an upsert, a de-duplicated append, an admission per task),
    so a retry is safe even when the connection broke after the statement was sent."""

    code = "state_unavailable"
    retryable: Retryable = "yes"


class AgentError(AgentWorkerError):
    """Agents, tools and turns."""

    code = "agent_error"


class UnknownAgent(AgentError):
    """The task names an agent that no loaded registration provides."""

    code = "unknown_agent"
    retryable: Retryable = "no"


class ToolPlanError(AgentError):
    """A tool's arguments cannot be planned into an operation (unknown tool, invalid arguments)."""

    code = "tool_plan_error"
    retryable: Retryable = "no"


class TurnError(AgentError):
    """The turn cannot continue, e.g. the workflow gave no result for a pending call."""

    code = "turn_error"
    retryable: Retryable = "no"


class ToolError(AgentError):
    """Raised by an effect tool (an own function declared with ``effect_tool``) to refuse a call it
    certainly did not carry out (invalid input, a business rule): the model sees the message as the
    tool's output, and nothing is retried. Any other exception from the tool is retried (after a
    lookup, when the tool has one), and when the attempts run out the task hands off."""

    code = "tool_error"
    retryable: Retryable = "no"


class McpUnavailable(AgentError):
    """An MCP server cannot be reached, or refuses the worker's credentials: retried by Temporal,
    then the task hands off (a tool's own error result goes to the model instead)."""

    code = "mcp_unavailable"
    retryable: Retryable = "yes"


class SandboxError(AgentWorkerError):
    """A sandbox operation failed; ``code`` says how."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "sandbox_error",
        operation: str = "",
        retryable: Retryable = "unknown",
        sandbox_id: str = "",
        details: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message, operation=operation, retryable=retryable)
        self.code = code
        self.sandbox_id = sandbox_id  # the sandbox it is about, when the task may not know it yet
        self.details = details or {}  # more for the task, in the failure's details


class NotifyError(AgentWorkerError):
    """A notifier did not take a notification: retried (``retryable="yes"``) when it may take it
    later (unreachable, 5xx, 429), not when it refused it (another 4xx)."""

    code = "notify_failed"


class WriteError(AgentWorkerError):
    """A business write or lookup failed; ``code`` says how."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "write_error",
        operation: str = "",
        retryable: Retryable = "unknown",
    ) -> None:
        super().__init__(message, operation=operation, retryable=retryable)
        self.code = code


class WriteConflict(WriteError):
    """The operation key is already committed with a different payload: never an overwrite."""

    def __init__(self, message: str, *, operation: str = "business.write") -> None:
        super().__init__(message, code="write_conflict", operation=operation, retryable="no")


class WriteUnknown(WriteError):
    """The write may or may not have been applied (a response lost after sending, a timeout, a reset).

    Never retried blindly: the workflow looks the operation key up first.
    """

    def __init__(self, message: str, *, operation: str = "business.write") -> None:
        super().__init__(message, code="write_unknown", operation=operation, retryable="no")


class WriteUnavailable(WriteError):
    """The business system could not be reached, so nothing was applied: safe to retry."""

    def __init__(self, message: str, *, operation: str = "business.write") -> None:
        super().__init__(message, code="write_unavailable", operation=operation, retryable="yes")


P = ParamSpec("P")
T = TypeVar("T")


def with_takeover(result: T, takeover: float | None) -> T:
    """``result`` with ``takeover_seconds`` set, when its type records one (``CommandRecord``,
    ``TurnResult``) and this attempt took over from a lost worker."""
    if takeover is None or not isinstance(result, pydantic.BaseModel):
        return result
    if "takeover_seconds" not in type(result).model_fields:
        return result
    return result.model_copy(update={"takeover_seconds": takeover})


def activity_boundary(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """The edge of every activity: bind the task id, run id, activity and attempt to every log line,
    heartbeat while it runs (so a dead worker is noticed within the heartbeat timeout and cancellations
    arrive), and translate the package's errors (and invalid payloads) into ``ApplicationError``s."""
    from agent_worker.activities.heartbeat import beat_details, heartbeating, taken_over_after

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        context = {}
        if activity.in_activity():
            info = activity.info()
            context = {
                "task_id": info.workflow_id,
                "run_id": info.workflow_run_id,
                "activity": info.activity_type,
                "attempt": info.attempt,
            }
        takeover = taken_over_after()
        try:
            with structlog.contextvars.bound_contextvars(**context):
                if takeover is not None:
                    log.info("took over from a lost worker", seconds_since_its_last_heartbeat=takeover)
                # An activity class may name what its heartbeats carry too (``heartbeat_note``): a
                # retry needs it even after a loss in the first seconds, so it goes at once.
                note = getattr(args[0], "heartbeat_note", None) if args else None
                async with heartbeating(
                    details=lambda: {**beat_details(), **(note or {})}, first_at_once=note is not None
                ):
                    result = await fn(*args, **kwargs)
            return with_takeover(result, takeover)
        except AgentWorkerError as err:
            translated = ApplicationError(
                str(err),
                {"code": err.code, "operation": err.operation, "retryable": err.retryable}
                | ({"sandbox_id": err.sandbox_id} if getattr(err, "sandbox_id", "") else {})
                | getattr(err, "details", {}),
                type=err.code,
                non_retryable=err.retryable == "no",
            )
            translated.__cause__ = err
            failure = redacted_failure(translated)
            raise failure from failure.__cause__
        except pydantic.ValidationError as err:
            translated = ApplicationError(
                f"invalid payload: {err}", type="invalid_payload", non_retryable=True
            )
            translated.__cause__ = err
            failure = redacted_failure(translated)
            raise failure from failure.__cause__
        except ApplicationError as err:
            failure = redacted_failure(err)
            raise failure from failure.__cause__
        except FailureError:
            raise  # cancellation and the SDK's own failures pass untouched
        except Exception as err:
            failure = redacted_failure(err)
            raise failure from failure.__cause__

    return wrapper


_MAX_CAUSES = 8


def redacted_failure(err: BaseException, depth: int = 0) -> ApplicationError:
    """``err`` as the ``ApplicationError`` Temporal would make of it (message, type, retry settings,
    details, and the chain of causes it follows), with every message and detail redacted."""
    if isinstance(err, ApplicationError):
        failure = ApplicationError(
            redact(err.message),
            *(redact_value(d) for d in err.details),
            type=err.type,
            non_retryable=err.non_retryable,
            next_retry_delay=err.next_retry_delay,
            category=err.category,
        )
    else:
        failure = ApplicationError(redact(str(err)), type=type(err).__name__)
    # The stack (code lines only) of the failure itself stays readable; its causes keep their types
    # and messages only. Temporal keeps a pending activity's last failure only while it is small
    # (about 4 KB, else "Failure exceeds size limit."), and the worker log has every stack in full.
    failure.__traceback__ = err.__traceback__ if depth == 0 else None
    cause = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    if cause is not None and depth < _MAX_CAUSES:
        failure.__cause__ = redacted_failure(cause, depth + 1)
    # Raised inside an ``except``, it gets the raw exception as its context: never follow that. (The
    # caller raises it ``from`` its own, redacted, cause, which suppresses the context too.)
    failure.__suppress_context__ = True
    return failure
