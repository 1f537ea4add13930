"""Networked store backends for a fleet: nothing a worker keeps is needed from its own disk.

- ``s3``: ``S3ArtifactStore``, artifacts on S3-compatible object storage (extra ``s3``);
- ``postgres_artifacts``: ``PostgresArtifactStore``, artifacts in a PostgreSQL table (extra
  ``postgres``);
- ``artifacts``: ``build_artifact_store(config)``, the one place an artifact store is built;
- ``provision``: ``python -m activities.stores.provision`` creates the bucket and database a
  fleet's stores need (the compose stack's ``stores-setup`` job).

Backends are imported lazily (their client libraries are extras): import the module you need.
``activities.stores.artifacts.build_artifact_store(config)`` builds the configured artifact store.
"""

__all__: list[str] = []
