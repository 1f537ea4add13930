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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from schemas.events import EventType
    from workflows import bounds, options
    from workflows.context import TaskContext
    from workflows.patches import BOUNDED_PATCH

# The failure type the SDK reports for an activity the worker that took it does not register.
NOT_REGISTERED = "NotFoundError"
Arg = TypeVar("Arg")
Result = TypeVar("Result")
_ROLE_QUEUES = {"agent": options.agent_queue, "sandbox": options.sandbox_queue}
# The roles whose work can run on the task queue. Business writes stay on their own queue, polled only
# by workers that hold the business system's credentials.
COLOCATABLE = tuple(_ROLE_QUEUES)


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
    ) -> Result:
        """Run ``activity`` of ``role`` with ``arg`` (``summary``: what the Temporal UI shows for it),
        where the task's placement says. An input too large to send hands the task off, explained
        (``workflows.bounds``)."""
        if workflow.patched(BOUNDED_PATCH) and isinstance(arg, BaseModel):
            bounds.check(f"the input of {summary}", arg)
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
