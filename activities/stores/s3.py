"""The artifact store on S3-compatible object storage (AWS S3, MinIO, Ceph, R2, ...).

Objects are keyed by digest (``<prefix>sha256/<hex>``), so every worker of a fleet, on any host,
reads what any other stored. ``put`` asks first (HEAD) and uploads only content that is not there
yet; content is immutable, so a racing upload of the same digest writes the same bytes. ``get``
verifies the digest: altered content raises ``ArtifactCorrupt``, never comes back.

Errors keep the distinction the activities rely on: nothing under the key is ``ArtifactNotFound``
(not retried); an unreachable endpoint, refused credentials or a missing bucket is
``ArtifactUnavailable`` (retried by Temporal), each naming the bucket.
"""

from __future__ import annotations

from typing import Any

from agent_worker.activities.artifacts import BlobStoreMixin, require_digest, verified
from agent_worker.activities.errors import ArtifactNotFound, ArtifactUnavailable
from agent_worker.schemas.digests import digest_bytes

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError as err:  # pragma: no cover - the extra is missing
    raise ImportError(f"the S3 artifact store needs boto3: pip install 'agent-worker[s3]' ({err})") from err

# One connection per concurrent activity thread, up to this many (botocore's default is 10).
MAX_POOL_CONNECTIONS = 64
# Temporal retries the activity; botocore retries only a quick transient blip itself.
MAX_ATTEMPTS = 2
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
_MISSING = {"404", "NoSuchKey", "NotFound"}


class S3ArtifactStore(BlobStoreMixin):
    """Artifacts as objects of one bucket, keyed by their digest.

    The store holds one boto3 client, which is thread-safe: activities call the store from worker
    threads (``asyncio.to_thread``) concurrently, sharing its connection pool
    (``max_pool_connections``). Credentials come from the standard AWS chain (``AWS_ACCESS_KEY_ID``
    / ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, instance roles...). Retries are kept low: Temporal
    retries the activity, with its own backoff.

    Args:
        bucket: the bucket; it must exist (``check`` says so when it does not).
        prefix: a key prefix inside the bucket (e.g. ``"agent-worker/"``).
        endpoint_url: an S3-compatible server's URL; ``None`` for AWS S3.
        region_name: the bucket's region (``None``: the AWS environment's).
        client: a ready boto3 S3 client instead of one built from the arguments above.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        region_name: str | None = None,
        max_pool_connections: int = MAX_POOL_CONNECTIONS,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        if client is None:
            config = Config(
                max_pool_connections=max_pool_connections,
                retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=READ_TIMEOUT,
            )
            client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint_url, region_name=region_name, config=config
            )
        self.client = client

    def __repr__(self) -> str:
        return f"S3ArtifactStore({self._where()!r})"

    def _where(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}"
        return f"{where} at {self.endpoint_url}" if self.endpoint_url else where

    def key(self, digest: str) -> str:
        """The object key of ``digest``."""
        return f"{self.prefix}sha256/{require_digest(digest)}"

    def _unavailable(self, operation: str, err: Exception) -> ArtifactUnavailable:
        if isinstance(err, ClientError):
            error = err.response.get("Error", {})
            code = error.get("Code", "?")
            detail = f"{code}: {error.get('Message') or 'no message'}"
            if code in ("NoSuchBucket",) or (operation == "artifacts.check" and code in _MISSING):
                detail = "the bucket does not exist"
        else:
            detail = str(err)
        return ArtifactUnavailable(f"artifact store {self._where()}: {detail}", operation=operation)

    def check(self) -> None:
        """Reach the bucket (HEAD bucket).

        Raises:
            ArtifactUnavailable: the endpoint cannot be reached, the credentials are refused, or the
                bucket does not exist; the message names the bucket.
        """
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except (BotoCoreError, ClientError) as err:
            raise self._unavailable("artifacts.check", err) from None

    def exists(self, digest: str) -> bool:
        """Whether an object is stored under ``digest`` (not verified)."""
        key = self.key(digest)
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in _MISSING:
                return False
            raise self._unavailable("artifacts.exists", err) from None
        except BotoCoreError as err:
            raise self._unavailable("artifacts.exists", err) from None
        return True

    def put(self, data: bytes) -> str:
        """Store ``data`` unless its digest is already there; return the digest."""
        digest = digest_bytes(data)
        if self.exists(digest):
            return digest
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=self.key(digest),
                Body=data,
                ContentType="application/octet-stream",
                Metadata={"sha256": digest.split(":", 1)[1]},
            )
        except (BotoCoreError, ClientError) as err:
            raise self._unavailable("artifacts.put", err) from None
        return digest

    def get(self, digest: str) -> bytes:
        """The bytes under ``digest``, verified.

        Raises:
            ArtifactNotFound: no object under the digest.
            ArtifactCorrupt: the object's bytes do not hash to the digest.
            ArtifactUnavailable: the bucket cannot be reached.
        """
        key = self.key(digest)
        try:
            data = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in _MISSING:
                raise ArtifactNotFound(
                    f"no artifact {digest} in {self._where()}", operation="artifacts.get"
                ) from None
            raise self._unavailable("artifacts.get", err) from None
        except BotoCoreError as err:
            raise self._unavailable("artifacts.get", err) from None
        return verified(digest, data, self._where())

    def close(self) -> None:
        """Close the client's connection pool."""
        self.client.close()


__all__ = ["S3ArtifactStore"]
