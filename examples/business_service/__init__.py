"""An example business API that honours idempotency keys (see ``server.py`` and ``README.md``): the
system ``activities/business/http.py`` writes to, and the one its tests run against."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_worker.examples.business_service.server import BusinessService

__all__ = ["BusinessService"]


def __getattr__(name: str) -> object:
    # Imported on first use, so ``python -m agent_worker.examples.business_service.server`` runs the
    # module once.
    if name == "BusinessService":
        from agent_worker.examples.business_service.server import BusinessService

        return BusinessService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
