"""Business writes exactly once: the writer contract, its adapters, and the ``business.*`` activities.

Adapters: ``sqlite`` (the embedded default), ``postgres``, ``http`` (any API that honours an
Idempotency-Key header and offers a lookup). Plug in your own with
``AGENT_WORKER_BUSINESS_WRITER=module:factory``.
"""

from agent_worker.activities.business.activities import BusinessActivities
from agent_worker.activities.business.base import BusinessWriter, load_writer, payload_digest
from agent_worker.activities.business.sqlite import SqliteBusinessStore

__all__ = ["BusinessActivities", "BusinessWriter", "SqliteBusinessStore", "load_writer", "payload_digest"]
