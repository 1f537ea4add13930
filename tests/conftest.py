"""Fixtures: one real Temporal dev server per session; each test gets its own task queue, data dir
and in-process worker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from agent_worker.activities.sandbox.docker import docker_available
from agent_worker.cli.sandbox_image import build_image
from agent_worker.schemas.config import WorkerConfig
from agent_worker.telemetry import configure_logging
from temporalio.client import Client

from tests.helpers.postgres_server import PostgresServer, start_postgres
from tests.helpers.revocation import gated
from tests.helpers.s3_server import s3_server
from tests.helpers.support import DevServer, TaskEnv, connect, launch_dev_server, make_config, running_worker


@pytest.fixture(scope="session", autouse=True)
def logs_to_stderr() -> None:
    """Worker logs go to stderr, as in production, so command output on stdout stays parseable."""
    configure_logging(WorkerConfig())


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The sandbox image on a reachable Docker daemon (built if missing). Never skipped: CI starts
    dockerd, and a machine without Docker fails these tests rather than hiding them."""
    image = WorkerConfig().docker_image
    problem = docker_available(image)
    if problem is not None and "not present" in problem:
        build_image(image)
        problem = docker_available(image)
    assert problem is None, f"the Docker tests need a daemon and the sandbox image: {problem}"
    return image


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server (fails, never skips, when PostgreSQL is not installed)."""
    server = start_postgres()
    yield server
    server.close()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """An S3-compatible server (moto's) on loopback: its endpoint URL."""
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = launch_dev_server(tmp_path_factory.mktemp("temporal"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
async def client(dev_server: DevServer) -> Client:
    return await connect(dev_server.address)


@pytest.fixture
def config_env(client: Client, dev_server: DevServer, tmp_path: Path) -> TaskEnv:
    """A task env with no worker running: the test runs its own (e.g. in subprocesses)."""
    return TaskEnv(client=client, config=make_config(tmp_path / "data"), address=dev_server.address)


@pytest.fixture
async def env(config_env: TaskEnv) -> AsyncIterator[TaskEnv]:
    """A task env with an in-process worker polling its task queue."""
    async with running_worker(config_env.client, config_env.config):
        yield config_env


@pytest.fixture
async def revocable_env(config_env: TaskEnv) -> AsyncIterator[TaskEnv]:
    """A task env whose in-process worker holds each authorization check until the test has had its
    chance to revoke (``tests.helpers.revocation``)."""
    env = TaskEnv(client=config_env.client, config=gated(config_env.config), address=config_env.address)
    async with running_worker(env.client, env.config):
        yield env


@pytest.fixture
async def docker_env(
    client: Client, dev_server: DevServer, tmp_path: Path, docker_image: str
) -> AsyncIterator[TaskEnv]:
    """A task env whose worker runs sandboxes on the Docker tier (named, not ``auto``)."""
    config = make_config(tmp_path / "data", sandbox_backend="docker", docker_image=docker_image)
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        yield env
