"""Create what the fleet's stores need before the first worker starts: the bucket of the artifact
store and the PostgreSQL database of the worker state. Both are created only when missing, so it
can run before every ``up``: the compose stack's one-shot ``stores-setup`` service runs

    python -m agent_worker.activities.stores.provision

Settings (environment):

- ``PROVISION_DATABASE``: a database to create on the server the libpq variables (``PGHOST``,
  ``PGUSER``, ``PGPASSWORD``, ...) reach, connecting to its ``postgres`` database; unset: none.
- ``AGENT_WORKER_ARTIFACT_BACKEND=s3`` with ``AGENT_WORKER_ARTIFACT_BUCKET`` (and
  ``AGENT_WORKER_ARTIFACT_ENDPOINT_URL``, ``AGENT_WORKER_ARTIFACT_REGION``, AWS credentials): the
  bucket to create.
- ``PROVISION_WAIT_SECONDS``: how long to wait for the services to answer (default 120).

Workers never create these themselves: a worker whose bucket or database is missing refuses to
start, naming it, rather than write into a store an operator did not intend.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping

DEFAULT_WAIT_SECONDS = 120.0


def create_database(name: str) -> bool:
    """Create database ``name`` unless it exists, on the server the libpq variables of this
    process reach; True when it was created."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dbname="postgres", autocommit=True, connect_timeout=5) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return True


def create_bucket(env: Mapping[str, str]) -> bool:
    """Create the artifact bucket unless it exists; True when it was created."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    bucket = env["AGENT_WORKER_ARTIFACT_BUCKET"]
    region = env.get("AGENT_WORKER_ARTIFACT_REGION") or None
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=env.get("AGENT_WORKER_ARTIFACT_ENDPOINT_URL") or None,
        region_name=region,
        config=Config(retries={"max_attempts": 2}, connect_timeout=5, read_timeout=30),
    )
    try:
        client.head_bucket(Bucket=bucket)
        return False
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    extra = {}
    if region and region != "us-east-1":
        extra["CreateBucketConfiguration"] = {"LocationConstraint": region}
    client.create_bucket(Bucket=bucket, **extra)
    return True


def _retrying(what: str, step: Callable[[], bool], deadline: float) -> None:
    while True:
        try:
            created = step()
        except Exception as err:  # the service may still be starting: retry until the deadline
            if time.monotonic() > deadline:
                raise SystemExit(f"stores-setup: {what}: {err}") from None
            time.sleep(1)
            continue
        print(f"stores-setup: {what}: {'created' if created else 'exists'}", flush=True)
        return


def provision(env: Mapping[str, str]) -> None:
    """Create the database and the bucket ``env`` names (see the module docstring).

    Raises:
        SystemExit: a service did not answer, or refused, within the wait; naming it.
    """
    deadline = time.monotonic() + float(env.get("PROVISION_WAIT_SECONDS") or DEFAULT_WAIT_SECONDS)
    database = env.get("PROVISION_DATABASE")
    if database:
        _retrying(f"database {database}", lambda: create_database(database), deadline)
    if env.get("AGENT_WORKER_ARTIFACT_BACKEND") == "s3":
        bucket = env.get("AGENT_WORKER_ARTIFACT_BUCKET")
        if not bucket:
            raise SystemExit(
                "stores-setup: AGENT_WORKER_ARTIFACT_BACKEND=s3 needs AGENT_WORKER_ARTIFACT_BUCKET"
            )
        _retrying(f"bucket {bucket}", lambda: create_bucket(env), deadline)


def main() -> int:
    provision(os.environ)
    return 0


if __name__ == "__main__":
    sys.exit(main())
