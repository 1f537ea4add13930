"""Approval SLAs (a policy rule's ``sla``): while a task waits for decisions, its durable timers remind
the approvers, escalate to a next group (who may then decide too), and end the wait at the request's
deadline, where the rule says whether the task hands off or goes on without the action. Each
reminder and escalation is one ``notify.send`` activity, recorded once it completes, so a worker
lost between them neither skips nor repeats one. Workflow code: deterministic."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.notify import NotifyActivities
    from agent_worker.schemas.actions import ActionResult, ActionStatus
    from agent_worker.schemas.approvals import ApprovalRequest
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.notify import NotificationKind, NotifyInput
    from agent_worker.telemetry import metrics

from agent_worker.workflows import options
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.patches import APPROVAL_SLA_PATCH, patched

# What the model (and the hand-off reason) is told of a request nobody decided: never "rejected".
EXPIRED = "expired, unanswered"


def remind_at(request: ApprovalRequest) -> datetime | None:
    """When ``request``'s reminder is due, or None (none configured, or sent)."""
    sla = request.sla
    if sla is None or sla.remind_after_seconds is None or request.reminded:
        return None
    return request.requested_at + timedelta(seconds=sla.remind_after_seconds)


def escalate_at(request: ApprovalRequest) -> datetime | None:
    """When ``request`` escalates, or None (no escalation configured, or escalated)."""
    sla = request.sla
    if sla is None or sla.escalate_after_seconds is None or request.escalated:
        return None
    return request.requested_at + timedelta(seconds=sla.escalate_after_seconds)


class ApprovalClock:
    """Reminders, escalations and expiry of the task's pending requests."""

    def __init__(self, task: TaskContext, *, publish: Callable[[], None]) -> None:
        self.task = task
        self.publish = publish  # escalation changes who may decide: the search attributes follow

    def governs(self, pending: list[ApprovalRequest]) -> bool:
        """Whether the SLA clock runs this wait (a pending request has an ``sla``)."""
        return any(r.sla is not None for r in pending) and patched(APPROVAL_SLA_PATCH)

    def next_moment(self, pending: list[ApprovalRequest]) -> datetime:
        """The earliest reminder, escalation or deadline among ``pending``."""
        moments = [r.deadline for r in pending]
        moments += [m for r in pending for m in (remind_at(r), escalate_at(r)) if m is not None]
        return min(moments)

    async def on_time(self, pending: list[ApprovalRequest]) -> None:
        """Do what is due now: reminders, then escalations, then expiry.

        Raises:
            HandOff: a request expired under a rule that hands off (or without an sla).
        """
        now = workflow.now()
        # A decision may arrive while a notification is sent: a decided request is left alone.
        for request in pending:
            due = remind_at(request)
            if due is not None and due <= now and not request.decided:
                await self.notify(request, "reminder", list(request.approvers))
                request.reminded = True
        for request in pending:
            due = escalate_at(request)
            if due is not None and due <= now and not request.decided:
                await self.escalate(request)
        expired = [r for r in pending if r.deadline <= now and not r.decided]
        if not expired:
            return
        carried_on = [r for r in expired if r.sla is not None and r.sla.on_expiry == "continue"]
        for request in carried_on:
            self.expire(request)
        handed_off = [r for r in expired if r not in carried_on]
        self.task.emit(
            EventType.APPROVAL_EXPIRED,
            request_ids=[r.request_id for r in expired],
            continued=[r.request_id for r in carried_on],
        )
        if handed_off:
            ids = ", ".join(r.request_id for r in handed_off)
            raise HandOff(f"approval deadline passed for {ids}: {EXPIRED}")

    async def escalate(self, request: ApprovalRequest) -> None:
        """Let ``request``'s next group decide it too, and tell them."""
        assert request.sla is not None
        group = request.sla.escalate_to
        request.approvers = [*request.approvers, *(a for a in group if a not in request.approvers)]
        request.escalated = True
        self.publish()
        await self.notify(request, "escalation", list(group), approvers=list(request.approvers))

    def expire(self, request: ApprovalRequest) -> None:
        """End ``request`` unanswered: its action does not run, and the model is told so."""
        request.decided = True
        item = next(i for i in self.task.state.batch if i.request_id == request.request_id)
        item.result = ActionResult(
            call_id=item.action.call_id,
            tool=item.action.tool,
            status=ActionStatus.EXPIRED,
            output=(
                f"{EXPIRED}: nobody among {', '.join(request.approvers)} decided by "
                f"{request.deadline.isoformat()}; {item.action.tool} did not run"
            ),
        )

    async def notify(
        self, request: ApprovalRequest, kind: NotificationKind, recipients: list[str], **extra: object
    ) -> None:
        """Send one notification and record it as an event (with ``extra``). A notifier that stays
        down past the activity's retries is recorded too: the task goes on waiting, never fails for it."""
        task, spec = self.task, self.task.valid_spec
        note = NotifyInput(
            key=f"{task.task_id}/{task.state.run_chain or ''}/{request.request_id}/{kind}",
            kind=kind,
            task_id=task.task_id,
            tenant=spec.tenant,
            agent=request.action.agent or spec.agent,
            request_id=request.request_id,
            tool=request.action.tool,
            version=request.version,
            recipients=recipients,
            deadline=request.deadline,
            reason=request.reason,
        )
        event = EventType.APPROVAL_REMINDED if kind == "reminder" else EventType.APPROVAL_ESCALATED
        metrics.workflow_counter(
            "agent_worker_approvals_reminded" if kind == "reminder" else "agent_worker_approvals_escalated",
            tool=request.action.tool,
        )
        summary = f"{kind} for {request.request_id} to {', '.join(recipients)}"
        await send_notice(task, note, event, summary, request_id=request.request_id, **extra)


async def send_notice(
    task: TaskContext, note: NotifyInput, event: EventType, summary: str, **data: object
) -> None:
    """Send ``note`` (``notify.send``) and record ``event`` with ``data`` and what the notifiers did.
    A notifier that stays down past the activity's retries is recorded too (``notified=False``, the
    error): the task goes on, never fails for it."""
    try:
        result = await workflow.execute_activity_method(
            NotifyActivities.send, note, **options.config(options.NOTIFY, summary=summary)
        )
    except ActivityError as err:
        if is_cancelled_exception(err):
            raise
        task.emit(event, notified=False, error=str(err.cause or err), **data)
        return
    task.emit(
        event,
        notified=True,
        recipients=note.recipients,
        sent=result.sent,
        repeated=result.repeated,
        unaddressed=result.unaddressed,
        **data,
    )


__all__ = ["EXPIRED", "ApprovalClock", "escalate_at", "remind_at", "send_notice"]
