"""Activities: every side effect a task has, one module (or package) per external system.

- ``agent/``: agent-kernel turns (``agent.turn``, ``agent.plan``)
- ``sandbox/``: sandbox backends (``sandbox.create``, ``sandbox.exec``, ``sandbox.destroy``)
- ``business.py``: idempotent business writes and lookups (``business.write``, ``business.lookup``)
- ``artifacts.py``: the content-addressed artifact store (``artifacts.ingest``)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_worker.schemas.lazy import lazy_exports

# Imported on first use (PEP 562): importing one activity module (``activities.errors``, as the CLI
# does) must not load the artifact and business stores.
_EXPORTS = {
    "ArtifactActivities": "agent_worker.activities.artifacts",
    "ArtifactStore": "agent_worker.activities.artifacts",
    "LocalArtifactStore": "agent_worker.activities.artifacts",
    "BusinessActivities": "agent_worker.activities.business",
    "SqliteBusinessStore": "agent_worker.activities.business",
}

if TYPE_CHECKING:
    from agent_worker.activities.artifacts import ArtifactActivities, ArtifactStore, LocalArtifactStore
    from agent_worker.activities.business import BusinessActivities, SqliteBusinessStore

__all__ = [
    "ArtifactActivities",
    "ArtifactStore",
    "BusinessActivities",
    "LocalArtifactStore",
    "SqliteBusinessStore",
]


__getattr__ = lazy_exports(globals(), _EXPORTS)
