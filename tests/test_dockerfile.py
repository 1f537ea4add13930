"""The worker image's Dockerfile, checked without building it (building needs the base image and
the package registries): what it installs, how, as whom, and what it runs."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.support import REPO

DOCKERFILE = REPO / "Dockerfile"


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", "", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.partition(" ") for line in lines if line and not line.startswith("#"))
    ]


def test_the_dockerfile_installs_the_package_and_runs_agent_worker() -> None:
    """The image installs this package (its dependencies first, from pyproject.toml), runs as a
    non-root user, and its entrypoint is the `agent-worker` console script (a worker by default)."""
    instructions = dockerfile_instructions()
    runs = [args for kind, args in instructions if kind == "RUN"]
    assert any("pip install --no-deps ." in run for run in runs)
    assert any("pip install -r /tmp/requirements.txt" in run for run in runs)
    [entrypoint] = [json.loads(args) for kind, args in instructions if kind == "ENTRYPOINT"]
    [cmd] = [json.loads(args) for kind, args in instructions if kind == "CMD"]
    assert entrypoint == ["agent-worker"]
    assert cmd[:1] == ["worker"]
    users = [args for kind, args in instructions if kind == "USER"]
    assert users and users[-1] not in ("root", "0")
    # The entrypoint is the console script the package declares.
    assert 'agent-worker = "agent_worker.cli.main:run"' in (REPO / "pyproject.toml").read_text()
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv"} <= ignored, "the build context must not carry the venv or git history"


def test_the_dockerfile_dependency_layer_lists_the_package_requirements(tmp_path: Path) -> None:
    """The dependency layer's requirement list, computed by the Dockerfile's own command from
    pyproject.toml, holds the runtime dependencies and the extras the compose stack's services use:
    docker/e2b (sandboxes), postgres/s3/redis (the fleet's stores and live streams), api (the HTTP
    API service) and otel."""
    [command] = [args for kind, args in dockerfile_instructions() if kind == "RUN" and "tomllib" in args]
    shell_command, _, target = command.rpartition(">")
    assert target.strip() == "/tmp/requirements.txt"
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    listed = subprocess.run(
        ["/bin/sh", "-c", shell_command.replace("python -c", f"{shlex.quote(sys.executable)} -c", 1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    requirements = listed.stdout.split("\n")
    names = {re.split(r"[<>=\[ ]", r, maxsplit=1)[0] for r in requirements if r}
    assert {"temporalio", "pydantic", "openai-agents", "docker", "psycopg", "e2b"} <= names
    # The fleet's stores: artifacts in object storage, state in PostgreSQL through a pool.
    assert {"boto3", "psycopg-pool"} <= names
    # The compose stack's api service (FastAPI, uvicorn) and its live streams in Redis.
    assert {"fastapi", "uvicorn", "starlette", "redis"} <= names
    assert not any(r.startswith("agent-worker") for r in requirements), "no self-reference (dev extra)"
