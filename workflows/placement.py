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
operation on it goes to that host's home queue (``SandboxRef.home_queue``, ``at_home``), with a
schedule-to-start timeout: a host that does not take it in time is gone, and the caller decides what
that costs (``home_unanswered``). The home queue is not the task queue, so such an activity waits for
its own dispatch. Since patch ``sandbox-exec-on-task-queue`` a command whose role is colocated goes to
the task queue first (``Home.here_first``), where the worker that made the sandbox usually runs the
task and takes it eagerly; any other worker refuses it before running anything
(``sandbox_elsewhere``), and it goes home, as do that sandbox's later commands
(``TaskState.refused_here``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from types import MappingProxyType
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from schemas.events import EventType
    from schemas.sandbox import SandboxRef
    from workflows import bounds, options
    from workflows.context import TaskContext
    from workflows.failures import failure_code, failure_message
    from workflows.patches import BOUNDED_PATCH, EXEC_ON_TASK_QUEUE_PATCH, SANDBOX_HOME_PATCH, patched

# The failure type the SDK reports for an activity the worker that took it does not register.
NOT_REGISTERED = "NotFoundError"
# The error code of a sandbox activity refused by a worker that does not hold its sandbox.
ELSEWHERE = "sandbox_elsewhere"
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
    # Try the task queue first (eager dispatch); a worker there that does not hold the sandbox refuses.
    here_first: bool = False

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


def near_home(task: TaskContext, sandbox: SandboxRef) -> Home | None:
    """``at_home(sandbox)``, tried on the task queue first when the task runs sandbox commands there
    and that queue has not refused this sandbox's commands before (patch ``sandbox-exec-on-task-queue``)."""
    home = at_home(sandbox)
    if home is None or home.queue == task.state.refused_here or not patched(EXEC_ON_TASK_QUEUE_PATCH):
        return home
    return replace(home, here_first=True)


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
            if home.here_first and role in self.task.state.colocated:
                try:
                    return await self.colocated(role, activity, arg, opts, summary, start_to_close, ELSEWHERE)
                except _Refused as refused:
                    if refused.code == ELSEWHERE:
                        self.task.state.refused_here = home.queue  # its later commands go home at once
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
        if role in self.task.state.colocated:
            with contextlib.suppress(_Refused):
                return await self.colocated(role, activity, arg, opts, summary, start_to_close)
        return await workflow.execute_activity_method(
            activity,
            arg,
            **options.config(
                opts, summary=summary, start_to_close=start_to_close, task_queue=_ROLE_QUEUES[role]()
            ),
        )

    async def colocated(
        self,
        role: str,
        activity: Callable[[Any, Arg], Awaitable[Result]],
        arg: Arg,
        opts: ActivityConfig,
        summary: str,
        start_to_close: timedelta | None,
        *refusals: str,
    ) -> Result:
        """Run ``activity`` on the task queue itself. A worker there without ``role`` fails it before
        it runs (``NOT_REGISTERED``): the role moves back to its role queue for good, and ``_Refused``
        tells the caller to run it there; so does a failure of one of the codes in ``refusals``."""
        state = self.task.state
        try:
            return await workflow.execute_activity_method(
                activity,
                arg,
                **options.config(
                    opts,
                    summary=summary,
                    start_to_close=start_to_close,
                    final_errors=(NOT_REGISTERED, *refusals),
                ),
            )
        except ActivityError as err:
            code = failure_code(err)
            if code not in (NOT_REGISTERED, *refusals):
                raise
            if code == NOT_REGISTERED and role in state.colocated:  # not yet moved by another in flight
                state.colocated.remove(role)
                self.task.emit(
                    EventType.DISPATCH_MOVED,
                    role=role,
                    reason=f"a worker on the task queue does not serve {role!r}: {failure_message(err)}",
                )
            raise _Refused(code or "") from err


class _Refused(Exception):
    """An activity on the task queue was refused by the worker that took it (``code``), before it ran."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code
