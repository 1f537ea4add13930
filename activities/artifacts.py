"""The content-addressed artifact store, and the ``artifacts.*`` activities.

Content is stored once under its sha256 digest, so writing the same bytes twice is harmless (that is
what lets a retried activity store its output again). Reads verify the digest, so a corrupted or
swapped file is reported, never served.

Every store satisfies ``ArtifactStore``; ``activities.stores.artifacts.build_artifact_store(config)``
is the one place a store is built from a config (``artifact_backend``):

- ``local``: ``LocalArtifactStore``, a directory under the data dir (the embedded default; a fleet
  must share it as a volume);
- ``s3``: ``activities.stores.s3.S3ArtifactStore``, S3-compatible object storage (extra ``s3``);
- ``postgres``: ``activities.stores.postgres_artifacts.PostgresArtifactStore``, a table of blobs
  (extra ``postgres``), the simple alternative for a fleet that already runs PostgreSQL.

The store API is synchronous; activities call it in worker threads (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agent_worker.activities.errors import (
    ArtifactCorrupt,
    ArtifactError,
    ArtifactNotFound,
    ArtifactUnavailable,
    activity_boundary,
)
from agent_worker.schemas.artifacts import ArtifactRef, IngestInput, IngestResult
from agent_worker.schemas.digests import canonical_json, digest_bytes, is_digest
from agent_worker.schemas.sandbox import CommandRecord
from agent_worker.schemas.tasks import EvidenceArchive, StoredArchive
from temporalio import activity


@runtime_checkable
class ArtifactStore(Protocol):
    """Content-addressed, immutable blobs: what every artifact store backend provides.

    ``put`` is idempotent (the same bytes give the same digest and are stored once); ``get``
    verifies the digest. Methods are synchronous and safe to call from several threads at once.
    """

    def put(self, data: bytes) -> str:
        """Store ``data`` and return its digest (``sha256:<hex>``)."""
        ...

    def get(self, digest: str) -> bytes:
        """The verified bytes under ``digest`` (``ArtifactNotFound``, ``ArtifactCorrupt``)."""
        ...

    def exists(self, digest: str) -> bool:
        """Whether content is stored under ``digest`` (not verified)."""
        ...

    def put_json(self, value: Any) -> str:
        """Store ``value`` as canonical JSON and return its digest."""
        ...

    def get_json(self, digest: str) -> Any:
        """Load the JSON value stored under ``digest``."""
        ...

    def ref(self, name: str, data: bytes, media_type: str = "application/octet-stream") -> ArtifactRef:
        """Store ``data`` and return a named reference to it."""
        ...

    def check(self) -> None:
        """Raise ``ArtifactUnavailable`` naming the store when it cannot be used (at worker start)."""
        ...

    def close(self) -> None:
        """Release connections (pools, clients); the store is not used afterwards."""
        ...


class BlobStoreMixin:
    """``put_json``, ``get_json`` and ``ref`` on top of a backend's ``put`` and ``get``."""

    def put(self, data: bytes) -> str:  # pragma: no cover - every backend overrides it
        raise NotImplementedError

    def get(self, digest: str) -> bytes:  # pragma: no cover - every backend overrides it
        raise NotImplementedError

    def put_json(self, value: Any) -> str:
        """Store ``value`` as canonical JSON and return its digest."""
        return self.put(canonical_json(value))

    def get_json(self, digest: str) -> Any:
        """Load the JSON value stored under ``digest``."""
        return json.loads(self.get(digest))

    def ref(self, name: str, data: bytes, media_type: str = "application/octet-stream") -> ArtifactRef:
        """Store ``data`` and return a named reference to it."""
        return ArtifactRef(name=name, digest=self.put(data), size=len(data), media_type=media_type)

    def close(self) -> None:
        """Nothing to release by default."""


def require_digest(digest: str, operation: str = "artifacts.get") -> str:
    """The hex part of ``digest``.

    Raises:
        ArtifactError: ``digest`` is not a ``sha256:<hex>`` digest (non-retryable).
    """
    if not is_digest(digest):
        raise ArtifactError(f"not a digest: {digest!r}", operation=operation, retryable="no")
    return digest.split(":", 1)[1]


def verified(digest: str, data: bytes, where: str) -> bytes:
    """``data`` if it hashes to ``digest``.

    Raises:
        ArtifactCorrupt: naming the digest and ``where`` it was read.
    """
    if digest_bytes(data) != digest:
        raise ArtifactCorrupt(
            f"artifact {digest} in {where} does not match its digest", operation="artifacts.get"
        )
    return data


class LocalArtifactStore(BlobStoreMixin):
    """A directory of immutable blobs named by their digest (``sha256/ab/cdef...``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalArtifactStore({str(self.root)!r})"

    def check(self) -> None:
        """Create the directory if needed.

        Raises:
            ArtifactUnavailable: it cannot be created or written.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ArtifactUnavailable(
                f"artifact store {self.root}: {err.strerror or err}", operation="artifacts.check"
            ) from None
        if not os.access(self.root, os.W_OK):
            raise ArtifactUnavailable(
                f"artifact store {self.root}: not writable", operation="artifacts.check"
            )

    def _path(self, digest: str) -> Path:
        hexdigest = require_digest(digest)
        return self.root / "sha256" / hexdigest[:2] / hexdigest[2:]

    def put(self, data: bytes) -> str:
        """Store ``data`` and return its digest. Idempotent."""
        digest = digest_bytes(data)
        path = self._path(digest)
        if path.exists():
            return digest
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def get(self, digest: str) -> bytes:
        """Return the bytes stored under ``digest``, verified.

        Raises:
            ArtifactNotFound: nothing is stored under the digest.
            ArtifactCorrupt: the stored bytes do not match the digest.
        """
        path = self._path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ArtifactNotFound(f"no artifact {digest}", operation="artifacts.get") from None
        return verified(digest, data, str(self.root))

    def exists(self, digest: str) -> bool:
        """Whether content is stored under ``digest`` (not verified)."""
        return self._path(digest).exists()


class ArtifactActivities:
    """``artifacts.*`` activities, bound to one store."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store

    @activity.defn(name="artifacts.ingest")
    @activity_boundary
    async def ingest(self, input: IngestInput) -> IngestResult:
        """Store the task's inline inputs and check that referenced ones exist: the input manifest."""
        return await asyncio.to_thread(self._ingest, input)

    @activity.defn(name="artifacts.archive")
    @activity_boundary
    async def archive(self, archive: EvidenceArchive) -> ArtifactRef:
        """Store one part of a task's older evidence as JSON; the task keeps only the reference."""
        return await asyncio.to_thread(self._store_archive, archive)

    @activity.defn(name="artifacts.archive_stored")
    @activity_boundary
    async def archive_stored(self, archive: StoredArchive) -> ArtifactRef:
        """``archive`` for records ``sandbox.exec`` stored: each is loaded by its digest (verified),
        its takeover put back, and the part stored as the same ``EvidenceArchive`` document. A record
        not in the store (run by a worker that did not store it) fails the activity for good with
        ``artifact_not_found``: the task then archives the part with the records inline."""
        return await asyncio.to_thread(self._archive_stored, archive)

    def _archive_stored(self, archive: StoredArchive) -> ArtifactRef:
        commands = []
        for digest in archive.commands:
            record = CommandRecord.model_validate(self.store.get_json(digest))
            if digest in archive.takeovers:
                record = record.model_copy(update={"takeover_seconds": archive.takeovers[digest]})
            commands.append(record)
        return self._store_archive(
            EvidenceArchive(
                task_id=archive.task_id, part=archive.part, commands=commands, artifacts=archive.artifacts
            )
        )

    def _store_archive(self, archive: EvidenceArchive) -> ArtifactRef:
        data = canonical_json(archive.model_dump(mode="json"))
        return self.store.ref(f"evidence-{archive.part:04d}.json", data, "application/json")

    def _ingest(self, input: IngestInput) -> IngestResult:
        refs = []
        for f in input.files:
            if f.content is not None:
                refs.append(self.store.ref(f.name, f.content.encode("utf-8"), f.media_type))
            else:
                assert f.digest is not None
                data = self.store.get(f.digest)
                refs.append(
                    ArtifactRef(name=f.name, digest=f.digest, size=len(data), media_type=f.media_type)
                )
        return IngestResult(inputs=refs)
