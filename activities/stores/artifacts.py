"""``build_artifact_store(config)``: the one place an artifact store is built from a config.

The worker, the CLI (``evidence``, ``verify``, the demo), the inbox and ``agent_worker.testing``
all go through it, so nothing reads or writes a local directory behind the config's back.
"""

from __future__ import annotations

from agent_worker.activities.artifacts import ArtifactStore, LocalArtifactStore
from agent_worker.schemas.config import ConfigError, WorkerConfig


def build_artifact_store(config: WorkerConfig) -> ArtifactStore:
    """The artifact store ``config`` chooses (``artifact_backend``): the one place a store is built
    from a config, for the worker, the CLI, the inbox and ``agent_worker.testing``.

    Nothing is contacted here; ``store.check()`` does that (the worker calls it at start).

    Raises:
        ConfigError: the backend misses a setting, or its extra is not installed.
    """
    backend = config.artifact_backend
    if backend == "local":
        return LocalArtifactStore(config.artifact_dir)
    if backend == "s3":
        if not config.artifact_bucket:
            raise ConfigError("AGENT_WORKER_ARTIFACT_BACKEND=s3 needs AGENT_WORKER_ARTIFACT_BUCKET")
        try:
            from agent_worker.activities.stores.s3 import S3ArtifactStore
        except ImportError as err:
            raise ConfigError(
                f"AGENT_WORKER_ARTIFACT_BACKEND=s3 needs boto3: pip install 'agent-worker[s3]' ({err})"
            ) from None
        return S3ArtifactStore(
            config.artifact_bucket,
            prefix=config.artifact_prefix,
            endpoint_url=config.artifact_endpoint_url or None,
            region_name=config.artifact_region or None,
        )
    dsn = config.artifact_postgres_dsn
    if dsn is None:
        raise ConfigError(
            "AGENT_WORKER_ARTIFACT_BACKEND=postgres needs AGENT_WORKER_ARTIFACT_DSN "
            "(or AGENT_WORKER_STATE_DSN)"
        )
    try:
        from agent_worker.activities.stores.postgres_artifacts import PostgresArtifactStore
    except ImportError as err:
        raise ConfigError(
            "AGENT_WORKER_ARTIFACT_BACKEND=postgres needs psycopg and psycopg-pool: "
            f"pip install 'agent-worker[postgres]' ({err})"
        ) from None
    return PostgresArtifactStore(dsn.get_secret_value())


__all__ = ["build_artifact_store"]
