"""Networked store backends for a fleet: nothing a worker keeps is needed from its own disk.

- ``s3``: ``S3ArtifactStore``, artifacts on S3-compatible object storage (extra ``s3``);
- ``postgres_artifacts``: ``PostgresArtifactStore``, artifacts in a PostgreSQL table (extra
  ``postgres``);
- ``artifacts``: ``build_artifact_store(config)``, the one place an artifact store is built;
- ``postgres``: ``PostgresJournal``, ``PostgresAdmission``, ``PostgresAuthorizer``,
  ``PostgresEventSink``, the shared state of ``state_backend=postgres`` (extra ``postgres``), over
  the pools and migrations of ``postgres_db`` (``agent-worker migrate``);
- ``state``: ``build_journal``, ``build_admission``, ``build_authorizer``, ``build_event_sink``,
  the one place each state store is built from a config, and the worker's start check;
- ``memory``: ``SqliteMemoryStore``, ``PostgresMemoryStore``, the agents' memory (``remember`` /
  ``recall``: docs/memory.md) in the state backend, ``build_memory_store(config)``;
- ``provision``: ``python -m agent_worker.activities.stores.provision`` creates the bucket and database a
  fleet's stores need (the compose stack's ``stores-setup`` job).

Backends are imported lazily (their client libraries are extras): import the module you need.
``activities.stores.artifacts.build_artifact_store(config)`` builds the configured artifact store.
"""

__all__: list[str] = []
