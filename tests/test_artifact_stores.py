"""The artifact store backends: one behaviour suite for the local directory, S3-compatible object
storage (moto's S3 server on loopback) and PostgreSQL (a real server on loopback); a worker that
cannot reach its store refuses to start naming it; and a task run on a worker that keeps its
artifacts in object storage leaves an evidence bundle that verifies from another data dir.

A live test against real object storage runs when ``AGENT_WORKER_TEST_S3_BUCKET`` (and AWS
credentials) are set.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_worker.activities.artifacts import ArtifactStore, LocalArtifactStore
from agent_worker.activities.errors import (
    ArtifactCorrupt,
    ArtifactError,
    ArtifactNotFound,
    ArtifactUnavailable,
)
from agent_worker.activities.stores.artifacts import build_artifact_store
from agent_worker.activities.stores.postgres_artifacts import TABLE, PostgresArtifactStore
from agent_worker.activities.stores.s3 import S3ArtifactStore
from agent_worker.cli.devserver import free_port
from agent_worker.schemas.config import ConfigError, WorkerConfig
from agent_worker.schemas.digests import digest_bytes
from agent_worker.schemas.tasks import TaskPhase
from agent_worker.workflows import AgentTaskWorkflow

from tests.helpers.postgres_server import PostgresServer
from tests.helpers.s3_server import new_bucket
from tests.helpers.support import REPO, DevServer, TaskEnv, example_spec, make_config, run_cli, running_worker

BACKENDS = ["local", "s3", "postgres"]


class Backend:
    """One backend under test: ``open()`` gives another store object on the same storage (another
    host), ``corrupt(digest, data)`` alters stored content behind the store's back."""

    def __init__(self, open: Callable[[], ArtifactStore], corrupt: Callable[[str, bytes], None]) -> None:
        self.open = open
        self.corrupt = corrupt


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The backend, its store objects closed afterwards."""
    made = _backend(request, tmp_path)
    opened: list[ArtifactStore] = []

    def open_store() -> ArtifactStore:
        opened.append(made.open())
        return opened[-1]

    yield Backend(open_store, made.corrupt)
    for store in opened:
        store.close()


def _backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        root = tmp_path / "artifacts"

        def corrupt_file(digest: str, data: bytes) -> None:
            hexdigest = digest.split(":", 1)[1]
            (root / "sha256" / hexdigest[:2] / hexdigest[2:]).write_bytes(data)

        return Backend(lambda: LocalArtifactStore(root), corrupt_file)
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = new_bucket(endpoint)

        def corrupt_object(digest: str, data: bytes) -> None:
            store = S3ArtifactStore(bucket, "fleet/", endpoint)
            store.client.put_object(Bucket=bucket, Key=store.key(digest), Body=data)

        return Backend(lambda: S3ArtifactStore(bucket, "fleet/", endpoint), corrupt_object)
    server: PostgresServer = request.getfixturevalue("postgres")

    def corrupt_row(digest: str, data: bytes) -> None:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE {TABLE} SET data = %s WHERE digest = %s", (data, digest))

    return Backend(lambda: PostgresArtifactStore(server.dsn), corrupt_row)


def unique(label: str) -> bytes:
    return f"{label} {uuid.uuid4().hex}\n".encode()


def test_stored_bytes_and_json_come_back_under_their_digest(backend: Backend) -> None:
    """put/get, exists and the JSON round trip work on every backend, and a digest is sha256."""
    store = backend.open()
    store.check()
    data = unique("report")
    digest = store.put(data)
    assert digest == digest_bytes(data)
    assert store.exists(digest) is True
    assert store.get(digest) == data
    value = {"rows": [1, 2, 3], "name": uuid.uuid4().hex}
    assert store.get_json(store.put_json(value)) == value
    ref = store.ref("out.txt", data, "text/plain")
    assert (ref.digest, ref.size, ref.media_type) == (digest, len(data), "text/plain")


def test_putting_the_same_content_twice_is_harmless(backend: Backend) -> None:
    """A retried activity stores its output again: same digest, same bytes, no error."""
    store = backend.open()
    data = unique("twice")
    assert store.put(data) == store.put(data) == backend.open().put(data)
    assert store.get(digest_bytes(data)) == data


def test_a_digest_never_stored_is_not_found(backend: Backend) -> None:
    """Missing content raises ArtifactNotFound (not retried) and exists() says no; a malformed
    digest is refused."""
    store = backend.open()
    missing = digest_bytes(unique("never stored"))
    assert store.exists(missing) is False
    with pytest.raises(ArtifactNotFound):
        store.get(missing)
    with pytest.raises(ArtifactError):
        store.get("md5:nope")


def test_content_altered_in_the_backend_is_reported_never_served(backend: Backend) -> None:
    """Bytes changed behind the store's back (file, object, row) raise ArtifactCorrupt on get."""
    store = backend.open()
    data = unique("invoice total 100.00")
    digest = store.put(data)
    backend.corrupt(digest, b"invoice total 1.00 (forged)\n")
    with pytest.raises(ArtifactCorrupt):
        store.get(digest)


def test_two_store_objects_see_each_others_content(backend: Backend) -> None:
    """Two stores on the same storage (two hosts of a fleet) read what the other wrote."""
    host_a, host_b = backend.open(), backend.open()
    from_a, from_b = unique("from a"), unique("from b")
    digest_a, digest_b = host_a.put(from_a), host_b.put(from_b)
    assert host_b.get(digest_a) == from_a
    assert host_a.get(digest_b) == from_b


# ---- choosing and checking the store --------------------------------------------------------------


def test_the_factory_builds_the_configured_backend(tmp_path: Path, s3_endpoint: str) -> None:
    """artifact_backend chooses the store; s3 without a bucket and postgres without a DSN are
    refused naming the variable."""
    base = {"data_dir": tmp_path}
    assert isinstance(build_artifact_store(WorkerConfig(**base)), LocalArtifactStore)
    store = build_artifact_store(
        WorkerConfig(
            **base,
            artifact_backend="s3",
            artifact_bucket="b1",
            artifact_prefix="p/",
            artifact_endpoint_url=s3_endpoint,
        )
    )
    assert isinstance(store, S3ArtifactStore) and (store.bucket, store.prefix) == ("b1", "p/")
    pg = build_artifact_store(
        WorkerConfig(**base, artifact_backend="postgres", artifact_dsn="host=127.0.0.1")
    )
    assert isinstance(pg, PostgresArtifactStore)
    pg.close()
    with pytest.raises(ConfigError, match="AGENT_WORKER_ARTIFACT_BUCKET"):
        WorkerConfig.from_env({"AGENT_WORKER_ARTIFACT_BACKEND": "s3"})
    with pytest.raises(ConfigError, match="AGENT_WORKER_ARTIFACT_DSN"):
        WorkerConfig.from_env({"AGENT_WORKER_ARTIFACT_BACKEND": "postgres"})


def test_a_missing_bucket_or_unreachable_store_is_unavailable_naming_it(s3_endpoint: str) -> None:
    """check() names the bucket when it does not exist and the endpoint when nothing answers there;
    a database that is down is unavailable too (retryable, unlike not-found)."""
    with pytest.raises(ArtifactUnavailable, match="s3://no-such-bucket/.*does not exist"):
        S3ArtifactStore("no-such-bucket", endpoint_url=s3_endpoint).check()
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ArtifactUnavailable, match=f"s3://some-bucket/ at {dead}") as err:
        S3ArtifactStore("some-bucket", endpoint_url=dead).get(digest_bytes(b"x"))
    assert err.value.retryable == "yes"
    down = PostgresArtifactStore(f"host=127.0.0.1 port={free_port()} dbname=x user=x connect_timeout=1")
    try:
        with pytest.raises(ArtifactUnavailable, match="artifact store postgres 127.0.0.1"):
            down.check()
    finally:
        down.close()


def test_a_worker_whose_bucket_is_missing_refuses_to_start_naming_it(
    dev_server: DevServer, s3_endpoint: str, tmp_path: Path
) -> None:
    """`agent-worker worker` with artifact_backend=s3 and a bucket that does not exist exits
    non-zero, saying which store and which bucket, instead of failing every task later."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TEMPORAL_ADDRESS": dev_server.address,
        "AGENT_WORKER_TASK_QUEUE": f"tq-{uuid.uuid4().hex[:8]}",
        "AGENT_WORKER_DATA_DIR": str(tmp_path / "data"),
        "AGENT_WORKER_AGENTS": "agent_worker.examples.monthly_report.agent:registration",
        "AGENT_WORKER_ARTIFACT_BACKEND": "s3",
        "AGENT_WORKER_ARTIFACT_BUCKET": "bucket-nobody-made",
        "AGENT_WORKER_ARTIFACT_ENDPOINT_URL": s3_endpoint,
    }
    done = subprocess.run(
        [sys.executable, "-m", "agent_worker.cli.main", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "artifact store" in done.stderr and "s3://bucket-nobody-made/" in done.stderr, done.stderr
    assert "does not exist" in done.stderr


# ---- a task on object storage, end to end ---------------------------------------------------------


async def test_evidence_of_a_task_on_object_storage_verifies_from_another_data_dir(
    client: Any,
    dev_server: DevServer,
    postgres: PostgresServer,
    s3_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A worker with artifact_backend=s3 (and business writes in PostgreSQL) runs the monthly
    report; `agent-worker evidence` and `verify`, run with an empty data dir standing for another
    host, fetch every artifact from the bucket and verify. Nothing lands in the worker's local
    artifact directory."""
    bucket = new_bucket(s3_endpoint)
    settings = {
        "artifact_backend": "s3",
        "artifact_bucket": bucket,
        "artifact_prefix": "tasks/",
        "artifact_endpoint_url": s3_endpoint,
        "business_backend": "postgres",
        "business_dsn": postgres.dsn,
    }
    config = make_config(tmp_path / "worker-data", **settings)
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        handle = await env.start(example_spec())
        await env.approve(handle)
        result = await asyncio.wait_for(handle.result(), 90)
    assert result.phase is TaskPhase.COMPLETED
    assert not config.artifact_dir.exists(), "artifacts went to the local disk"
    report = result.evidence.artifacts[0]
    assert S3ArtifactStore(bucket, "tasks/", s3_endpoint).exists(report.digest)

    other_host = tmp_path / "other-host"
    monkeypatch.setenv("AGENT_WORKER_DATA_DIR", str(other_host))
    for key, value in settings.items():
        monkeypatch.setenv(f"AGENT_WORKER_{key.upper()}", value)
    bundle = tmp_path / "bundle"
    code, out, err = await run_cli(
        capsys, "--address", env.address, "evidence", result.task_id, "-o", str(bundle)
    )
    assert code == 0, out + err
    assert (bundle / "artifacts" / report.digest.split(":", 1)[1]).is_file()
    code, out, err = await run_cli(capsys, "verify", str(bundle))
    assert code == 0, out + err
    assert out.strip().splitlines()[-1].startswith("verified:"), out
    assert f"ok  artifact {report.name}" in out


# ---- live object storage --------------------------------------------------------------------------


LIVE_BUCKET = os.environ.get("AGENT_WORKER_TEST_S3_BUCKET")


@pytest.mark.skipif(
    not LIVE_BUCKET,
    reason="live object storage: set AGENT_WORKER_TEST_S3_BUCKET (and AWS credentials; "
    "AGENT_WORKER_TEST_S3_ENDPOINT_URL for a non-AWS server) to run it",
)
def test_live_object_storage_round_trips_and_detects_missing_content() -> None:
    """Against the real bucket: check passes, content round trips under a throwaway prefix,
    the same content put twice is stored once, and a digest never stored is not found."""
    store = S3ArtifactStore(
        LIVE_BUCKET or "",
        prefix=f"agent-worker-test/{uuid.uuid4().hex[:8]}/",
        endpoint_url=os.environ.get("AGENT_WORKER_TEST_S3_ENDPOINT_URL") or None,
    )
    store.check()
    data = unique("live")
    digest = store.put(data)
    try:
        assert store.put(data) == digest
        assert store.get(digest) == data
        with pytest.raises(ArtifactNotFound):
            store.get(digest_bytes(unique("never")))
    finally:
        store.client.delete_object(Bucket=store.bucket, Key=store.key(digest))


async def test_an_object_store_outage_mid_task_is_retried_and_loses_nothing(
    client: Any,
    dev_server: DevServer,
    postgres: PostgresServer,
    s3_endpoint: str,  # for its test credentials; this test runs a server of its own
    tmp_path: Path,
) -> None:
    """The object store goes down while a task waits for approval: the activity that next needs it
    fails as artifact_unavailable and Temporal retries it; once the store is back the task
    completes with one write, and every artifact of its evidence is in the bucket."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    bucket = new_bucket(endpoint)
    config = make_config(
        tmp_path / "data",
        artifact_backend="s3",
        artifact_bucket=bucket,
        artifact_endpoint_url=endpoint,
        business_backend="postgres",
        business_dsn=postgres.dsn,
    )
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    try:
        async with running_worker(client, config):
            handle = await env.start(example_spec())
            [request] = (await env.awaiting_approval(handle)).pending
            server.stop()  # the outage: nothing answers on the endpoint
            await handle.signal(
                AgentTaskWorkflow.submit_decision,
                {
                    "request_id": request.request_id,
                    "version": request.version,
                    "decision": "approve",
                    "principal": "finance-lead",
                },
            )
            failure = await _first_activity_failure(handle)
            assert "artifact_unavailable" in failure or "artifact store" in failure, failure
            assert bucket in failure
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            server.start()  # the store is back, with everything it held
            result = await asyncio.wait_for(handle.result(), 120)
    finally:
        server.stop()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
    try:
        assert result.phase is TaskPhase.COMPLETED, result.reason
        [write] = result.evidence.writes
        assert write.confirmed is True
        store = S3ArtifactStore(bucket, endpoint_url=endpoint)
        for ref in [*result.evidence.inputs, *result.evidence.artifacts]:
            assert store.exists(ref.digest), ref.name
    finally:
        server.stop()


async def _first_activity_failure(handle: Any, within: float = 60.0) -> str:
    """The last failure message of the first pending activity that has failed once."""
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        description = await handle.describe()
        for pending in description.raw_description.pending_activities:
            if pending.HasField("last_failure"):
                failure = pending.last_failure
                kind = failure.application_failure_info.type
                return f"{pending.activity_type.name}: {failure.message} ({kind})"
        await asyncio.sleep(0.1)
    raise AssertionError("no activity failed while the object store was down")
