"""Activities: every side effect a task has, one module (or package) per external system.

- ``agent/``: agent-kernel turns (``agent.turn``, ``agent.plan``)
- ``sandbox/``: sandbox backends (``sandbox.create``, ``sandbox.exec``, ``sandbox.destroy``)
- ``business.py``: idempotent business writes and lookups (``business.write``, ``business.lookup``)
- ``artifacts.py``: the content-addressed artifact store (``artifacts.ingest``)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    """Import an exported name from its module on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not exported here (nor a submodule already imported).
    """
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
