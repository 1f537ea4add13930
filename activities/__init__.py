"""Activities: every side effect a task has, one module (or package) per external system.

- ``agent/``: agent-kernel turns (``agent.turn``, ``agent.plan``)
- ``sandbox/``: sandbox backends (``sandbox.create``, ``sandbox.exec``, ``sandbox.destroy``)
- ``business.py``: idempotent business writes and lookups (``business.write``, ``business.lookup``)
- ``artifacts.py``: the content-addressed artifact store (``artifacts.ingest``)
"""

from activities.artifacts import ArtifactActivities, ArtifactStore, LocalArtifactStore
from activities.business import BusinessActivities, SqliteBusinessStore

__all__ = [
    "ArtifactActivities",
    "ArtifactStore",
    "BusinessActivities",
    "LocalArtifactStore",
    "SqliteBusinessStore",
]
