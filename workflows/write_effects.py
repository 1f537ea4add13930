"""Running business writes from the workflow: each write once under its operation key
(``business.write``), an unknown outcome looked up (``business.lookup``) before anything else, a
write in flight when the task is cancelled let settle, every write recorded as evidence and looked
up again before the task completes. Workflow code: deterministic, no I/O of its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception
from temporalio.workflow import ActivityConfig

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.business import BusinessActivities
    from agent_worker.schemas.actions import BusinessWrite, ProposedAction
    from agent_worker.schemas.authz import AuthzRequest
    from agent_worker.schemas.events import EventType
    from agent_worker.schemas.tasks import TaskPhase
    from agent_worker.schemas.writes import (
        LookupInput,
        WriteEvidence,
        WriteInput,
        WriteOutcome,
        WriteReceipt,
        operation_key,
    )
    from agent_worker.telemetry import metrics

from agent_worker.workflows import bounds, fork, options
from agent_worker.workflows.context import TaskContext
from agent_worker.workflows.failures import failure_code, failure_message
from agent_worker.workflows.handoff import HandOff
from agent_worker.workflows.patches import (
    BOUNDED_PATCH,
    MINIMUM_ROUND_TRIPS_PATCH,
    SETTLE_CANCELLED_WRITE_PATCH,
    patched,
)


class WriteRevoked(Exception):
    """The write refused to run: its approver no longer holds the permission (``authz_revoked``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _CancelledWrite(Exception):
    """The task was cancelled while a write was in flight; ``receipt`` is what the write returned
    once it settled (None: it failed, so only a lookup can tell)."""

    def __init__(self, receipt: WriteReceipt | None) -> None:
        super().__init__("cancelled during a business write")
        self.receipt = receipt


class WriteEffects:
    """Runs one task's business writes and records them as evidence."""

    def __init__(self, task: TaskContext) -> None:
        self.task = task

    async def write(
        self,
        action: ProposedAction,
        plan: BusinessWrite,
        authz: AuthzRequest | None = None,
        checked: Callable[[], object] | None = None,
    ) -> str | None:
        """Write once under the action's operation key. An unknown outcome is looked up before
        anything else: found, it is recorded; not found, the write is sent again under the same key.
        A conflict, a system that stays down, or a lookup that stays unavailable hands the task off.
        Returns the model-visible receipt, or None when nothing was written. ``checked`` is called
        once the write has answered past its approval check (``authz``), before its outcome's events."""
        spec = self.task.valid_spec
        reused = fork.reuse(self.task, action, plan)  # a fork's write its parent committed: not again
        if reused is not None:
            return reused
        # Keyed by the run chain too: a reused task id is a new task, whose writes are its own.
        key = operation_key(self.task.task_id, action.call_id, self.task.state.run_chain)
        write_input = WriteInput(
            operation_key=key,
            task_id=self.task.task_id,
            tenant=spec.tenant,
            record_type=plan.record_type,
            payload=plan.payload,
            system=plan.system,
            authz=authz,
        )
        if patched(BOUNDED_PATCH):
            bounds.check(f"write {key}'s input", write_input)
        self.task.set_phase(TaskPhase.COMMITTING)
        settle = patched(SETTLE_CANCELLED_WRITE_PATCH)
        try:
            receipt, by_lookup = await self.write_rounds(action, key, write_input, settle, checked)
        except _CancelledWrite as cancelled:
            await self.settle_cancelled(action, key, cancelled.receipt, plan.system)
            raise asyncio.CancelledError from None
        except (asyncio.CancelledError, ActivityError) as err:
            by_cancel = isinstance(err, asyncio.CancelledError) or is_cancelled_exception(err)
            if not settle or not by_cancel or workflow.cancellation_reason() is None:
                raise
            await self.settle_cancelled(action, key, None, plan.system)  # cancelled during a lookup
            raise
        self.task.set_phase(TaskPhase.RUNNING)
        return self.record_write(action, key, receipt, system=plan.system, by_lookup=by_lookup)

    async def write_rounds(
        self,
        action: ProposedAction,
        key: str,
        write_input: WriteInput,
        settle: bool,
        checked: Callable[[], object] | None = None,
    ) -> tuple[WriteReceipt, bool]:
        """Write, and look up after an unknown outcome, until the write settles (or hand off). The
        receipt, and whether a lookup gave it.

        Raises:
            WriteRevoked: the write checked its approval (``WriteInput.authz``) and found it revoked.
        """
        receipt: WriteReceipt | None = None
        by_lookup = False
        for round_ in range(1, options.MAX_WRITE_ROUNDS + 1):
            self.task.emit(EventType.WRITE_ATTEMPTED, call_id=action.call_id, operation_key=key, round=round_)
            try:
                receipt = await self.send_write(write_input, settle)
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                code, message = failure_code(err), failure_message(err)
            else:
                code, message = None, ""
            if code == "authz_revoked":
                raise WriteRevoked(message)
            if checked is not None and code in (None, "write_unknown"):
                checked()  # the write got past its approval check: that came first
                checked = None
            if receipt is not None:
                break
            if code == "write_conflict":
                self.task.emit(EventType.WRITE_CONFLICT, operation_key=key, error=message)
                metrics.workflow_counter("agent_worker_writes", outcome="conflict")
                raise HandOff(f"write {key} conflicts with what the business system holds: {message}")
            if code != "write_unknown":
                raise HandOff(f"write {key} did not happen, the business system is unavailable: {message}")
            self.task.emit(EventType.WRITE_UNKNOWN, operation_key=key, error=message)
            metrics.workflow_counter("agent_worker_writes", outcome="unknown")
            self.task.set_phase(TaskPhase.RECONCILING)
            found = await self.lookup(key, system=write_input.system)
            if found is None:
                raise HandOff(f"write {key}: outcome unknown and the lookup stayed unavailable")
            if found.outcome is WriteOutcome.COMMITTED:
                receipt, by_lookup = found, True
                break
            self.task.set_phase(TaskPhase.COMMITTING)  # not found: send it again, same key
        if receipt is None:
            raise HandOff(f"write {key} did not settle after {options.MAX_WRITE_ROUNDS} rounds")
        return receipt, by_lookup

    async def send_write(self, write_input: WriteInput, settle: bool) -> WriteReceipt:
        """One ``business.write``. With ``settle``, a cancellation of the task does not abandon the
        write in flight (it may commit all the same): the write is let finish (its retries bound the
        wait) and ``_CancelledWrite`` carries what it returned."""
        kwargs = options.config(
            options.BUSINESS_WRITE,
            summary=f"write {write_input.record_type} {write_input.operation_key}",
            task_queue=options.business_queue(),
        )
        if not settle:
            return await workflow.execute_activity_method(BusinessActivities.write, write_input, **kwargs)
        sending = workflow.start_activity_method(BusinessActivities.write, write_input, **kwargs)
        try:
            return await asyncio.shield(sending)
        except asyncio.CancelledError:
            if workflow.cancellation_reason() is None:
                raise  # evicted from the worker's cache, not cancelled: the next replay goes on
            try:
                receipt: WriteReceipt | None = await asyncio.shield(sending)
            except ActivityError:
                receipt = None
            raise _CancelledWrite(receipt) from None

    async def settle_cancelled(
        self, action: ProposedAction, key: str, receipt: WriteReceipt | None, system: str | None
    ) -> None:
        """The task is being cancelled during the write: whatever committed under ``key`` goes into
        the events and the evidence all the same (looked up when the write's own answer is lost)."""
        by_lookup = receipt is None or receipt.outcome is WriteOutcome.UNKNOWN
        if by_lookup:
            receipt = await asyncio.shield(self.lookup(key, options.CONFIRM_LOOKUP, system=system))
        if receipt is not None and receipt.outcome is not WriteOutcome.UNKNOWN:
            self.record_write(action, key, receipt, during_cancel=True, system=system, by_lookup=by_lookup)

    def record_write(
        self,
        action: ProposedAction,
        key: str,
        receipt: WriteReceipt,
        during_cancel: bool = False,
        system: str | None = None,
        by_lookup: bool = False,
    ) -> str:
        """Record a settled write as evidence and an event; returns the model-visible receipt. Since
        the minimum of round trips a committed receipt confirms the write (``confirmed_by``: the
        write's own, or the lookup's that found it), so completion looks up only what is unknown."""
        extra = {"during_cancel": True} if during_cancel else {}
        metrics.workflow_counter("agent_worker_writes", outcome=receipt.outcome.value)
        if receipt.outcome is WriteOutcome.REJECTED:
            self.task.emit(EventType.WRITE_REJECTED, operation_key=key, detail=receipt.detail, **extra)
            return json.dumps(
                {"outcome": "rejected", "operation_key": key, "detail": receipt.detail}, sort_keys=True
            )
        evidence = WriteEvidence(call_id=action.call_id, operation_key=key, receipt=receipt, system=system)
        if (
            receipt.outcome is WriteOutcome.COMMITTED
            and receipt.payload_digest is not None
            and patched(MINIMUM_ROUND_TRIPS_PATCH)
        ):
            evidence.confirmed, evidence.confirmed_by = True, "lookup" if by_lookup else "write"
        self.task.state.writes.append(evidence)
        self.task.emit(
            EventType.WRITE_CONFIRMED,
            operation_key=key,
            outcome=receipt.outcome.value,
            record_id=receipt.record_id,
            replayed=receipt.replayed,
            **extra,
        )
        return json.dumps(
            {"outcome": receipt.outcome.value, "record_id": receipt.record_id, "operation_key": key},
            sort_keys=True,
        )

    async def lookup(
        self, key: str, patience: ActivityConfig = options.BUSINESS_LOOKUP, *, system: str | None = None
    ) -> WriteReceipt | None:
        """The committed receipt under ``key``; an UNKNOWN-outcome receipt when nothing is there;
        None when the lookup itself stayed unavailable."""
        try:
            result = await workflow.execute_activity_method(
                BusinessActivities.lookup,
                LookupInput(operation_key=key, system=system),
                **options.config(
                    patience, summary=f"{patience.get('summary')}: {key}", task_queue=options.business_queue()
                ),
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            return None
        self.task.emit(EventType.WRITE_RECONCILED, operation_key=key, found=result.found)
        metrics.workflow_counter("agent_worker_reconciliations", found=result.found)
        if result.receipt is None:
            return WriteReceipt(operation_key=key, outcome=WriteOutcome.UNKNOWN, detail="not found by lookup")
        return result.receipt

    async def confirm_writes(self) -> None:
        """Look every write up again before completing: evidence, not the write's own word."""
        writes = [w for w in self.task.state.writes if w.confirmed is None]
        if not writes:
            return
        self.task.set_phase(TaskPhase.RECONCILING)
        for evidence in writes:
            found = await self.lookup(evidence.operation_key, options.CONFIRM_LOOKUP, system=evidence.system)
            if found is not None:
                evidence.confirmed = (
                    found.outcome is WriteOutcome.COMMITTED
                    and found.payload_digest == evidence.receipt.payload_digest
                )
                if patched(MINIMUM_ROUND_TRIPS_PATCH):
                    evidence.confirmed_by = "lookup"
