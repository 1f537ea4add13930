"""Where a task's agent turns and sandbox commands run.

Each role (``agent``, ``sandbox``) polls a queue of its own: ``<task queue>.agent`` and
``.sandbox``. An activity there waits for its own dispatch (about 30 ms on the dev server), where
an activity on the workflow's own task queue starts in the reply that completes the workflow task
(eager dispatch). So when the worker running the task also serves a role (``agent-worker worker``
with all roles, the default), the task schedules that role's work on the task queue itself.

Which roles that is comes with the answer of ``tenants.admit``, the local activity the task asks
first, so the choice is in the history and replays the same; the state carries it across
continue-as-new. A fleet can change while a task runs: if a worker without the role picks such an
activity up, it fails before anything runs (the SDK's ``NotFoundError``), and the task moves that
role back to its role queue for good and runs it there.

A sandbox of a host-local tier (process, docker) lives on the host that created it, so every later
operation on it goes to that host's home queue (``SandboxRef.home_queue``, ``at_home``), whatever the
placement, with a schedule-to-start timeout: a host that does not take it in time is gone, and the
caller decides what that costs (``home_unanswered``). Before that, a colocated task asks the worker
running it, which usually holds the sandbox, in a local activity (``sandbox.exec_here`` for a command,
``workflows.sandbox_effects``; ``sandbox.destroy_here`` at the end).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.sandbox import SandboxRef
    from pydantic import BaseModel

from agent_worker.workflows import bounds, options
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.patches import BOUNDED_PATCH, SANDBOX_HOME_PATCH, patched

# The failure type the SDK reports for an activity the worker that took it does not register.
NOT_REGISTERED = "NotFoundError"
Arg = TypeVar("Arg")
Result = TypeVar("Result")
# Read-only: with ``workflows`` passed through the sandbox, every task on a worker shares module state.
_ROLE_QUEUES = MappingProxyType({"agent": options.agent_queue, "sandbox": options.sandbox_queue})
# The roles whose work can run on the task queue. Business writes stay on their own queue, polled only
# by workers that hold the business system's credentials.
COLOCATABLE = tuple(_ROLE_QUEUES)


@dataclass(frozen=True)
class Home:
    """The host queue of a sandbox, and how long an operation waits there for its host."""

    queue: str
    wait: timedelta

    @property
    def host(self) -> str:
        """The host id, as named in the queue."""
        return self.queue.rpartition(options.HOME_QUEUE_SEPARATOR)[2]


def at_home(sandbox: SandboxRef) -> Home | None:
    """Where operations on ``sandbox`` must run: its host's home queue, or None (any sandbox worker:
    an e2b sandbox, one made before sandboxes had homes, or a run from before the change)."""
    if sandbox.home_queue is None or not patched(SANDBOX_HOME_PATCH):
        return None
    return home_of(sandbox.home_queue, sandbox.home_wait_seconds)


def home_of(queue: str | None, wait_seconds: float | None) -> Home | None:
    """The home at ``queue`` (None: none), with its host's wait (None: ``SANDBOX_HOME_WAIT``)."""
    if queue is None:
        return None
    wait = options.SANDBOX_HOME_WAIT if wait_seconds is None else timedelta(seconds=wait_seconds)
    return Home(queue, wait)


def home_unanswered(err: ActivityError) -> bool:
    """Whether ``err`` says no worker of the home queue took the activity in time (its host is gone)."""
    return isinstance(err.cause, ActivityTimeout) and err.cause.type == TimeoutType.SCHEDULE_TO_START


class Placement:
    """Schedules a task's role activities, on the task queue when its workers serve the role."""

    def __init__(self, task: TaskContext) -> None:
        self.task = task

    async def execute(
        self,
        role: str,
        activity: Callable[[Any, Arg], Awaitable[Result]],
        arg: Arg,
        opts: ActivityConfig,
        *,
        summary: str,
        start_to_close: timedelta | None = None,
        home: Home | None = None,
    ) -> Result:
        """Run ``activity`` of ``role`` with ``arg`` (``summary``: what the Temporal UI shows for it),
        where the task's placement says, or on ``home`` (a sandbox's host, ``at_home``). An input too
        large to send hands the task off, explained (``workflows.bounds``).

        Raises:
            ActivityError: as the activity failed; with ``home``, ``home_unanswered`` tells the
                failure of a host that did not take it in time.
        """
        if patched(BOUNDED_PATCH) and isinstance(arg, BaseModel):
            bounds.check(f"the input of {summary}", arg)
        if home is not None:
            return await workflow.execute_activity_method(
                activity,
                arg,
                **options.config(
                    opts,
                    summary=summary,
                    start_to_close=start_to_close,
                    task_queue=home.queue,
                    schedule_to_start=home.wait,
                ),
            )
        state = self.task.state
        if role in state.colocated:
            try:
                return await workflow.execute_activity_method(
                    activity,
                    arg,
                    **options.config(
                        opts, summary=summary, start_to_close=start_to_close, final_errors=(NOT_REGISTERED,)
                    ),
                )
            except ActivityError as err:
                if not (isinstance(err.cause, ApplicationError) and err.cause.type == NOT_REGISTERED):
                    raise
                if role in state.colocated:  # not yet moved by another of its activities in flight
                    state.colocated.remove(role)
                    self.task.emit(
                        EventType.DISPATCH_MOVED,
                        role=role,
                        reason=f"a worker on the task queue does not serve {role!r}: {err.cause.message}",
                    )
        return await workflow.execute_activity_method(
            activity,
            arg,
            **options.config(
                opts, summary=summary, start_to_close=start_to_close, task_queue=_ROLE_QUEUES[role]()
            ),
        )
