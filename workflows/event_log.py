"""A task's events: recorded in the state's bounded tail (``emit``; ignored input bounded per
delivery, ``emit_ignored``) and delivered to the sink in order (``events.publish``, or
``events.publish_here`` in the workflow task since patch ``local-delivery``), in parts of bounded
size. Workflow code: deterministic, no I/O of its own."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.events import EventActivities
    from agent_worker.activities.stores import live_events
    from agent_worker.schemas.events import (
        Event,
        EventType,
        PublishEventsInput,
        PublishEventsResult,
        delivery_basis,
        event_id_for,
    )
    from agent_worker.schemas.tasks import TaskState

from agent_worker.workflows import bounds, options
from agent_worker.workflows.patches import BOUNDED_PATCH, PACKED_EVENTS_PATCH, patched

# Events the state keeps: past it, the oldest delivered ones are dropped.
EVENT_TAIL = 100
# Undelivered events that trigger a delivery between steps (it also happens before every wait for a
# human, before continue-as-new, and at the end); each delivery is a marker in the history. 25 in
# runs begun before patch ``lean-evidence``.
DELIVERY_BATCH = 50
DELIVERY_BATCH_BEFORE = 25
# Ignored decisions and inputs recorded one by one between two event deliveries; past it they are
# counted and summed up in one event, so a flood of bad signals costs a counter each.
IGNORED_EVENTS_PER_DELIVERY = 100
# One ``events.publish`` input at most (a delivery of more is split).
DELIVERY_BYTES = 400_000


class EventLog:
    """One task's events: recorded in its state, delivered to the sink. The task's workflow decides
    in its first workflow task whether (and how) this run delivers."""

    def __init__(self, task_id: str, state: TaskState) -> None:
        self.task_id = task_id
        self.state = state
        # Events delivered at all (``DELIVER_EVENTS_PATCH``), by a local activity
        # (``LOCAL_DELIVERY_PATCH``), and this run's index in its chain (part of each delivery's basis):
        # decided in ``AgentTaskWorkflow.run``.
        self.delivering = False
        self.local_delivery = False
        self.run_index = 0

    def undelivered(self) -> int:
        return self.state.event_seq - self.state.delivered_seq if self.delivering else 0

    async def deliver_events(self) -> None:
        """Deliver the events the sink does not have yet, in order (``events.publish``), in parts of
        at most ``DELIVERY_BYTES``. Shielded, so the last events of a cancelled task are delivered too."""
        self.report_held_back()
        # What is ignored from now on goes into the next delivery, one by one again.
        self.state.ignored_window = 0
        if not self.undelivered():
            return
        events = [e for e in self.state.events if e.seq > self.state.delivered_seq]
        for part in self.delivery_parts(events):
            summary = f"deliver events {part[0].seq}-{part[-1].seq}"
            packing = patched(PACKED_EVENTS_PATCH)
            whole = PublishEventsInput(task_id=self.task_id, events=part)
            delivery = PublishEventsInput.pack(self.task_id, part) if packing else whole
            if self.local_delivery:
                history = workflow.info().get_current_history_length()
                delivery.basis = whole.basis = delivery_basis(self.run_index, history)
                if await asyncio.shield(self.deliver_here(delivery, len(part), summary)):
                    self.state.delivered_seq = part[-1].seq
                    continue
            result = await self.send_events(delivery, summary)
            if packing and result.delivered != len(part):
                # A worker from before packing read none of the packed events: send them whole.
                await self.send_events(whole, summary)
            self.state.delivered_seq = part[-1].seq
        self.trim_events()

    async def deliver_here(self, delivery: PublishEventsInput, count: int, summary: str) -> bool:
        """Deliver in this workflow task, as the local activity ``events.publish_here`` (patch
        ``local-delivery``): no activity and no workflow task of its own. The workflow task may still
        fail to commit, and its retry number its events otherwise; the delivery's ``basis`` lets the
        sink replace what it delivered then (``activities.events``). False when the worker's sink
        cannot replace, or did not answer in a few tries: the events then go as ``events.publish``."""
        try:
            result = await workflow.execute_local_activity_method(
                EventActivities.publish_here,
                delivery,
                **options.local_config(options.EVENTS_LOCAL, summary=summary),
            )
        except (ActivityError, ApplicationError) as err:  # a local activity's failure comes as itself
            if is_cancelled_exception(err):
                raise
            return False
        return result.delivered == count

    async def send_events(self, delivery: PublishEventsInput, summary: str) -> PublishEventsResult:
        """One ``events.publish``. Shielded, so the last events of a cancelled task are delivered too.

        An activity: committed in the history before it runs, so what it delivers is what the task
        recorded (``deliver_here`` first, since patch ``local-delivery``)."""
        sending = workflow.execute_activity_method(
            EventActivities.publish, delivery, **options.config(options.EVENTS, summary=summary)
        )
        return await asyncio.shield(sending)

    def delivery_parts(self, events: list[Event]) -> list[list[Event]]:
        """``events`` in order, split so no ``events.publish`` input passes ``DELIVERY_BYTES``."""
        if not patched(BOUNDED_PATCH):
            return [events]
        parts: list[list[Event]] = [[]]
        size = 0
        for event in events:
            event_size = bounds.size_of(event)
            if parts[-1] and size + event_size > DELIVERY_BYTES:
                parts.append([])
                size = 0
            parts[-1].append(event)
            size += event_size
        return parts

    def sink_due(self) -> bool:
        """Whether a waiting task should deliver its events now: ignored input has filled the bound
        of events recorded one by one, so they go to the sink while the wait goes on (and the ones
        that come in while it delivers are counted, then summed up)."""
        state = self.state  # (the window only counts once payloads are bounded: see emit_ignored)
        return state.ignored_window >= IGNORED_EVENTS_PER_DELIVERY or bool(state.ignored_unreported)

    def emit_ignored(self, type: EventType, **data: Any) -> None:
        """Record ignored input as an event, up to ``IGNORED_EVENTS_PER_DELIVERY`` between two
        deliveries; past that, count it by type, to be summed up at the next delivery. So a flood of
        bad signals does bounded work and keeps the state bounded until the sink has caught up."""
        state = self.state
        if patched(BOUNDED_PATCH):
            if state.ignored_window >= IGNORED_EVENTS_PER_DELIVERY:
                state.ignored_unreported[type.value] = state.ignored_unreported.get(type.value, 0) + 1
                return
            state.ignored_window += 1
        self.emit(type, **data)

    def report_held_back(self) -> None:
        """One event for each kind of ignored input held back since the last delivery."""
        held, self.state.ignored_unreported = self.state.ignored_unreported, {}
        for type, count in sorted(held.items()):
            self.emit(
                EventType(type),
                reason=f"{count} more ignored since the last delivery, past the "
                f"{IGNORED_EVENTS_PER_DELIVERY} recorded one by one; counted, not recorded",
                count=count,
            )

    def trim_events(self) -> None:
        """Keep the state's tail bounded, dropping only events already delivered."""
        events = self.state.events
        excess = len(events) - EVENT_TAIL
        if excess <= 0:
            return
        if self.delivering:
            # Events are in seq order, so the delivered ones are a prefix: count them without a scan
            # (this runs for every event; a scan made a flood of signals quadratic).
            excess = min(excess, max(self.state.delivered_seq - events[0].seq + 1, 0))
        del events[:excess]

    def emit(self, type: EventType, **data: Any) -> None:
        """Record an event in the state's bounded tail (and the replay-safe workflow log)."""
        self.state.event_seq += 1
        if patched(BOUNDED_PATCH):
            data = bounds.cut_values(data)
        chain = self.state.run_chain
        event = Event(
            event_id=event_id_for(self.task_id, chain, self.state.event_seq),
            run_chain=chain,
            task_id=self.task_id,
            seq=self.state.event_seq,
            type=type,
            at=workflow.now(),
            phase=self.state.phase.value,
            data=data,
        )
        self.state.events.append(event)
        self.trim_events()
        live_events.offer(event)  # a side channel, like the log: never on replay
        # At DEBUG: every event is in the event stream, the sink and ``status`` already; an INFO line
        # for each cost 5-10% of the worker's CPU per task (issue 21's profile).
        workflow.logger.debug("%s %s", type.value, data)
