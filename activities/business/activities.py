"""The ``business.write`` and ``business.lookup`` activities over one ``BusinessWriter``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import structlog
from agent_worker.activities.authz import Authorizer
from agent_worker.activities.business.base import BusinessWriter
from agent_worker.activities.errors import WriteError, activity_boundary
from agent_worker.schemas.writes import LookupInput, LookupResult, WriteInput, WriteReceipt
from temporalio import activity

log = structlog.get_logger(__name__)


class BusinessActivities:
    """Writes and lookups. A retried write (its worker died, its attempt timed out) first looks its
    operation key up, so a write that committed before the failure is reported, not repeated.

    ``writer`` is the default business system; ``systems`` the others, by name (a write or lookup
    names its system; one no worker registers fails for good, naming the systems there are).

    ``authorizer`` answers a write that carries its approval (``WriteInput.authz``): the permission is
    checked again in the write's own activity, right before its transaction, instead of in an
    ``authz.check`` activity of its own (one round trip less, and a shorter window for a revocation
    to slip between the check and the effect)."""

    def __init__(
        self,
        writer: BusinessWriter,
        systems: Mapping[str, BusinessWriter] | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.writer = writer
        self.systems = dict(systems or {})
        self.authorizer = authorizer

    def writer_for(self, system: str | None) -> BusinessWriter:
        """The writer of ``system`` (None: the default).

        Raises:
            WriteError: no business system of that name here (not retried).
        """
        if system is None:
            return self.writer
        try:
            return self.systems[system]
        except KeyError:
            raise WriteError(
                f"no business system named {system!r} on this worker; it has: "
                f"{', '.join(sorted(self.systems)) or 'only the default'} (AGENT_WORKER_BUSINESS_SYSTEMS)",
                code="unknown_system",
                retryable="no",
            ) from None

    @activity.defn(name="business.write")
    @activity_boundary
    async def write(self, input: WriteInput) -> WriteReceipt:
        """Commit one write under its operation key (a repeat returns the first receipt)."""
        writer = self.writer_for(input.system)
        if activity.in_activity() and activity.info().attempt > 1:
            found = await asyncio.to_thread(writer.lookup, input.operation_key)
            if found is not None:
                log.info("retried write was already committed", operation_key=input.operation_key)
                return found.model_copy(update={"replayed": True})
        receipt = await asyncio.to_thread(self._authorized_write, writer, input)
        log.info(
            "write done",
            operation_key=input.operation_key,
            outcome=receipt.outcome.value,
            record_id=receipt.record_id,
            replayed=receipt.replayed,
        )
        return receipt

    def _authorized_write(self, writer: BusinessWriter, input: WriteInput) -> WriteReceipt:
        """``authorize``, then the write (in one worker thread: both may ask a database)."""
        self.authorize(input)
        return writer.write(input)

    def authorize(self, input: WriteInput) -> None:
        """Check the write's approval (``input.authz``; nothing to check without one).

        Raises:
            WriteError: ``authz_revoked`` (not retried) when the approver no longer holds the
                permission, or ``authz_unavailable`` when this worker has no authorizer to ask
                (fail closed: nothing is written unchecked).
        """
        if input.authz is None:
            return
        if self.authorizer is None:
            raise WriteError(
                "this worker has no authorizer to check the write's approval; nothing was written",
                code="authz_unavailable",
                retryable="no",
            )
        decision = self.authorizer.check(input.authz)
        if not decision.allowed:
            log.info("write refused: approval revoked", operation_key=input.operation_key)
            raise WriteError(decision.reason, code="authz_revoked", retryable="no")

    @activity.defn(name="business.lookup")
    @activity_boundary
    async def lookup(self, input: LookupInput) -> LookupResult:
        """Whether the operation key was committed, with its receipt."""
        receipt = await asyncio.to_thread(self.writer_for(input.system).lookup, input.operation_key)
        return LookupResult(operation_key=input.operation_key, found=receipt is not None, receipt=receipt)
