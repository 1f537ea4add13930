"""The content-addressed artifact store, and the ``artifacts.*`` activities.

Content is stored once under its sha256 digest, so writing the same bytes twice is harmless (that is
what lets a retried activity store its output again). Reads verify the digest, so a corrupted or
swapped file is reported, never served.

The local store is a directory; every worker of a fleet that runs turns, sandboxes or writes must see
the same one (a shared volume) until a remote store backend lands.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from temporalio import activity

from activities.errors import ArtifactCorrupt, ArtifactError, ArtifactNotFound, activity_boundary
from schemas.artifacts import ArtifactRef, IngestInput, IngestResult
from schemas.digests import canonical_json, digest_bytes, is_digest
from schemas.tasks import EvidenceArchive


class LocalArtifactStore:
    """A directory of immutable blobs named by their digest (``sha256/ab/cdef...``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, digest: str) -> Path:
        if not is_digest(digest):
            raise ArtifactError(f"not a digest: {digest!r}", operation="artifacts.get", retryable="no")
        hexdigest = digest.split(":", 1)[1]
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
        if digest_bytes(data) != digest:
            raise ArtifactCorrupt(f"artifact {digest} does not match its digest", operation="artifacts.get")
        return data

    def exists(self, digest: str) -> bool:
        """Whether content is stored under ``digest`` (not verified)."""
        return self._path(digest).exists()

    def put_json(self, value: Any) -> str:
        """Store ``value`` as canonical JSON and return its digest."""
        return self.put(canonical_json(value))

    def get_json(self, digest: str) -> Any:
        """Load the JSON value stored under ``digest``."""
        return json.loads(self.get(digest))

    def ref(self, name: str, data: bytes, media_type: str = "application/octet-stream") -> ArtifactRef:
        """Store ``data`` and return a named reference to it."""
        return ArtifactRef(name=name, digest=self.put(data), size=len(data), media_type=media_type)


class ArtifactActivities:
    """``artifacts.*`` activities, bound to one store."""

    def __init__(self, store: LocalArtifactStore) -> None:
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
        data = canonical_json(archive.model_dump(mode="json"))
        name = f"evidence-{archive.part:04d}.json"
        return await asyncio.to_thread(self.store.ref, name, data, "application/json")

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
