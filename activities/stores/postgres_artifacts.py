"""The artifact store in PostgreSQL: the simple alternative to object storage for a fleet that
already runs PostgreSQL (blobs up to a few MB; larger outputs belong in object storage).

One table, ``agent_worker_artifacts(digest text primary key, data bytea)``, created by ``check``
(the worker calls it at start) and on first use. ``put`` inserts with ``ON CONFLICT DO NOTHING``, so
storing the same content twice, from any worker, is harmless; ``get`` verifies the digest.
"""

from __future__ import annotations

import threading

from agent_worker.activities.artifacts import BlobStoreMixin, require_digest, verified
from agent_worker.activities.errors import ArtifactNotFound, ArtifactUnavailable
from agent_worker.activities.stores import postgres_db as db
from agent_worker.schemas.digests import digest_bytes

try:
    import psycopg
    from psycopg_pool import PoolTimeout
except ImportError as err:  # pragma: no cover - the extra is missing
    raise ImportError(
        f"the PostgreSQL artifact store needs psycopg and psycopg-pool: pip install 'agent-worker[postgres]' "
        f"({err})"
    ) from err

TABLE = "agent_worker_artifacts"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    digest text PRIMARY KEY,
    data bytea NOT NULL,
    size bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


class PostgresArtifactStore(BlobStoreMixin):
    """Artifacts as rows keyed by digest, through a ``psycopg_pool`` connection pool.

    Thread-safe: activities call it from worker threads (``asyncio.to_thread``), each borrowing a
    pooled connection. The pool opens on first use, so building the store contacts nothing.

    Args:
        dsn: a libpq connection string or URL.
        max_size: the most connections the pool opens.
    """

    def __init__(self, dsn: str, *, max_size: int = db.MAX_POOL_SIZE) -> None:
        self._pool = db.new_pool(dsn, "agent-worker-artifacts", max_size)
        self._lock = threading.Lock()
        self._ready = False
        self._where = db.describe(dsn)

    def __repr__(self) -> str:
        return f"PostgresArtifactStore({self._where!r})"

    def _unavailable(self, operation: str, err: Exception) -> ArtifactUnavailable:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return ArtifactUnavailable(f"artifact store postgres {self._where}: {detail}", operation=operation)

    def _ensure(self) -> None:
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            self._pool.open(wait=False)
            with self._pool.connection() as conn:
                conn.execute(SCHEMA)
            self._ready = True

    def _run(self, operation: str, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        try:
            self._ensure()
            with self._pool.connection() as conn:
                cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description else []
        except (psycopg.OperationalError, psycopg.errors.InsufficientPrivilege, PoolTimeout) as err:
            raise self._unavailable(operation, err) from None

    def check(self) -> None:
        """Connect and create the table if it is missing.

        Raises:
            ArtifactUnavailable: the database cannot be reached or refuses the table.
        """
        self._run("artifacts.check", f"SELECT count(*) FROM {TABLE} WHERE false", ())

    def put(self, data: bytes) -> str:
        """Store ``data`` (once) and return its digest."""
        digest = digest_bytes(data)
        self._run(
            "artifacts.put",
            f"INSERT INTO {TABLE} (digest, data, size) VALUES (%s, %s, %s) ON CONFLICT (digest) DO NOTHING",
            (digest, data, len(data)),
        )
        return digest

    def get(self, digest: str) -> bytes:
        """The bytes under ``digest``, verified.

        Raises:
            ArtifactNotFound: no row under the digest.
            ArtifactCorrupt: the stored bytes do not hash to the digest.
            ArtifactUnavailable: the database cannot be reached.
        """
        require_digest(digest)
        rows = self._run("artifacts.get", f"SELECT data FROM {TABLE} WHERE digest = %s", (digest,))
        if not rows:
            raise ArtifactNotFound(
                f"no artifact {digest} in postgres {self._where}", operation="artifacts.get"
            )
        return verified(digest, bytes(rows[0][0]), f"postgres {self._where}")  # type: ignore[arg-type]

    def exists(self, digest: str) -> bool:
        """Whether a row is stored under ``digest`` (not verified)."""
        require_digest(digest, "artifacts.exists")
        return bool(self._run("artifacts.exists", f"SELECT 1 FROM {TABLE} WHERE digest = %s", (digest,)))

    def close(self) -> None:
        """Close the pool's connections."""
        self._pool.close()


__all__ = ["PostgresArtifactStore"]
