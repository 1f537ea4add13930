"""The business-writer contract every adapter honours.

- ``write(input)`` commits ``input.payload`` under ``input.operation_key`` exactly once. The same key
  with the same record type and payload returns the first receipt (``replayed=True``); with anything
  else it raises ``WriteConflict`` and overwrites nothing. A deterministic business refusal is a
  receipt with outcome ``rejected`` (never retried).
- ``lookup(key)`` returns the committed receipt, or None.
- Failures say what is known: ``WriteUnavailable`` when the request certainly did not apply (the
  system was down, the connection was refused before sending), ``WriteUnknown`` when it may have
  (the response was lost). The first is retried as is; the second is reconciled by ``lookup``
  before anything else happens.

Adapters are synchronous (they run in a thread); the ``business.*`` activities wrap them.
"""

from __future__ import annotations

from typing import Protocol

from agent_worker.activities.loading import load_object
from agent_worker.schemas.digests import canonical_json, digest_bytes
from agent_worker.schemas.writes import WriteInput, WriteReceipt


class BusinessWriter(Protocol):
    """A business system that honours operation keys."""

    def write(self, input: WriteInput) -> WriteReceipt:
        """Commit under the operation key, or return the receipt the key already has."""
        ...

    def lookup(self, operation_key: str) -> WriteReceipt | None:
        """The receipt committed under ``operation_key``, or None."""
        ...


def payload_digest(input: WriteInput) -> str:
    """The digest stored beside the key: of the canonical JSON payload."""
    return digest_bytes(canonical_json(input.payload))


def record_id_for(operation_key: str) -> str:
    """A record id derived from the operation key (the same on every retry)."""
    return "rec-" + operation_key.removeprefix("op-")[:16]


def load_writer(path: str, **settings: object) -> BusinessWriter:
    """A writer from a ``module:factory`` import path, called with ``settings``.

    Raises:
        ValueError: the path is malformed or cannot be loaded.
    """
    return load_object(path, "business writer")(**settings)
