"""The ``business.write`` and ``business.lookup`` activities over one ``BusinessWriter``."""

from __future__ import annotations

import asyncio

import structlog
from temporalio import activity

from activities.business.base import BusinessWriter
from activities.errors import activity_boundary
from schemas.writes import LookupInput, LookupResult, WriteInput, WriteReceipt

log = structlog.get_logger(__name__)


class BusinessActivities:
    """Writes and lookups. A retried write (its worker died, its attempt timed out) first looks its
    operation key up, so a write that committed before the failure is reported, not repeated."""

    def __init__(self, writer: BusinessWriter) -> None:
        self.writer = writer

    @activity.defn(name="business.write")
    @activity_boundary
    async def write(self, input: WriteInput) -> WriteReceipt:
        """Commit one write under its operation key (a repeat returns the first receipt)."""
        if activity.in_activity() and activity.info().attempt > 1:
            found = await asyncio.to_thread(self.writer.lookup, input.operation_key)
            if found is not None:
                log.info("retried write was already committed", operation_key=input.operation_key)
                return found.model_copy(update={"replayed": True})
        receipt = await asyncio.to_thread(self.writer.write, input)
        log.info(
            "write done",
            operation_key=input.operation_key,
            outcome=receipt.outcome.value,
            record_id=receipt.record_id,
            replayed=receipt.replayed,
        )
        return receipt

    @activity.defn(name="business.lookup")
    @activity_boundary
    async def lookup(self, input: LookupInput) -> LookupResult:
        """Whether the operation key was committed, with its receipt."""
        receipt = await asyncio.to_thread(self.writer.lookup, input.operation_key)
        return LookupResult(operation_key=input.operation_key, found=receipt is not None, receipt=receipt)
