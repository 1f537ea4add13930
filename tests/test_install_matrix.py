"""The package as a user installs it (issue 38, acceptance 1): `pip install agent-worker`, alone or
with one extra, each in a fresh venv, from the wheel built once from this tree (not editable, so a
module or data file the packaging leaves out fails here as it would for a user).

Every install line runs the CLI (``agent-worker --help``, ``agent-worker worker --help``) and
imports every module the package ships, except those of the extras it lacks (which must fail, if
they fail, with an ImportError); each extra then runs what it enables (its backend, for ``redis`` a
real Redis round trip); the base install runs the README's scripted agent and ``agent-worker demo``
end to end (the embedded Temporal server, a worker, a task), with nothing but the base
dependencies. Two static checks complete it: every third-party module our code imports is a
declared dependency, and the wheel carries every module and data file of the tree.

uv makes the venvs, in parallel, from its shared cache. Measured here (2 cores shared with other
test runs, warm cache): the venvs in ~25 s, the whole file in ~2 minutes.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.redis_server import redis_server
from tests.helpers.support import REPO, free_port
from tests.helpers.venvs import MODULE_WALK, build_wheel, make_venv, venv_env
from tests.test_readme import runnable_blocks

# Each install line: the extra installed (None: the base install).
LINES: dict[str, str | None] = {
    "base": None,
    "docker": "docker",
    "e2b": "e2b",
    "s3": "s3",
    "postgres": "postgres",
    "otel": "otel",
    "litellm": "litellm",
    "api": "api",
    "redis": "redis",
    "dev": "dev",
}
# Modules that need an extra (imported only when its backend is configured, or by its command):
# on a line without it they may fail to import; every other module imports on every line.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "postgres": (
        "agent_worker.activities.stores.postgres",
        "agent_worker.activities.stores.postgres_artifacts",
        "agent_worker.activities.stores.postgres_db",
    ),
    "redis": ("agent_worker.activities.stores.redis_streams",),
    "s3": ("agent_worker.activities.stores.s3",),
    "api": ("agent_worker.api", "agent_worker.inbox"),
    "otel": ("agent_worker.telemetry.agent_spans",),
}
# What each extra enables, run in its venv (after every module has imported).
EXTRA_CHECKS: dict[str, str] = {
    "docker": """
from agent_worker.activities.sandbox.docker import docker_available
import docker.utils.socket
problem = docker_available("agent-worker-matrix:absent")
assert problem is None or "docker package" not in problem, problem
""",
    "e2b": """
import e2b, httpx
from agent_worker.activities.sandbox.e2b import E2BSandbox
""",
    "s3": """
from agent_worker.activities.stores.s3 import S3ArtifactStore
store = S3ArtifactStore("matrix", endpoint_url="http://127.0.0.1:9", region_name="us-east-1")
assert store.bucket == "matrix"
""",
    "postgres": """
import psycopg, psycopg_pool
from agent_worker.activities.business.postgres import postgres_writer
from agent_worker.activities.stores.postgres_db import new_pool
assert psycopg.pq.__impl__ in ("binary", "c"), psycopg.pq.__impl__
""",
    "otel": """
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from agent_worker.telemetry.tracing import configure_tracing
exporter = InMemorySpanExporter()
provider = configure_tracing(endpoint=None, exporter=exporter)
with provider.get_tracer("matrix").start_as_current_span("matrix-span"):
    pass
provider.force_flush()
assert [span.name for span in exporter.get_finished_spans()] == ["matrix-span"]
""",
    "litellm": """
from agents.extensions.models.litellm_model import LitellmModel
LitellmModel(model="ollama/llama3", base_url="http://127.0.0.1:9")
""",
    "api": """
from agent_worker.api import ApiConfig, build_api
from agent_worker.inbox import build_app, cmd_inbox_web
""",
    "redis": """
import os
from agent_worker.activities.stores.redis_streams import RedisStreamBackend
from agent_worker.schemas.streams import StreamEntry
store = RedisStreamBackend(os.environ["MATRIX_REDIS_URL"], prefix="matrix:")
assert store.append("t", "c", [StreamEntry(task_id="t", kind="token", data={"text": "hi"})]) == [1]
assert [e.data["text"] for e in store.read("t", "c")] == ["hi"]
""",
}
# Files of the tree that are not part of the package (docs, generated exports for other languages).
REPO_ONLY = ("examples/business_service/README.md", "schemas/jsonschema/")
RUN_TIMEOUT = 240
# A team's own code beside the worker (issue 39, acceptance 4): packages named like our folders, with
# their own content, and a module registering the team's scripted agent, which imports them. The
# module names are format fields so that nothing rewrites them into ours.
USER_PACKAGES = {"schemas": "NOTE = 'buy milk'\n", "workflows": "APPROVER = 'me'\n"}
USER_AGENTS = """
from {schemas} import NOTE
from {workflows} import APPROVER

from agent_worker import Agent, AgentRegistration, BusinessWrite, write_tool
from agent_worker.testing import Script


@write_tool
def file_note(text: str) -> BusinessWrite:
    \"\"\"File a note in the business system (the policy asks a human first).\"\"\"
    return BusinessWrite(record_type="note", payload={{"text": text}})


notes = AgentRegistration(
    name="notes",
    build=lambda: Agent(name="notes", instructions="File the user's note.", tools=[file_note]),
    scripted_model=lambda: Script(("file_note", {{"text": NOTE}}), "Filed " + NOTE),
)
"""
USER_RUN = """
import asyncio

import {schemas}, {workflows}
from agent_worker.testing import local_worker


async def main() -> None:
    async with local_worker(["team_agents:notes"]) as client:  # loaded by import path, as configured
        spec = {{"agent": "notes", "prompt": "Note: buy milk", "policy": {{"default_approvers": ["me"]}}}}
        task = await client.start(spec)
        request = await client.next_request(task.task_id)
        await client.decide(task.task_id, request.request_id, "approve", principal={workflows}.APPROVER)
        result = await client.result(task.task_id)
        print(result.phase.value, "-", result.final_output)
        print({schemas}.__file__, {workflows}.__file__)


asyncio.run(main())
"""
# Lines installed and run at once: enough to keep 2 cores busy while a line waits on its install.
PARALLEL_LINES = 3


# ---- the venvs ------------------------------------------------------------------------------------


@dataclass
class LineRun:
    """What one install line did: its venv's Python (None: the install failed, ``error`` says why)
    and each program it ran (name -> the finished process)."""

    python: Path | None = None
    error: str = ""
    runs: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this tree, built once (through its sdist)."""
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def matrix(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, LineRun]:
    """Every install line, installed and run, a few lines at a time (a line is mostly one process
    at a time, and installs wait on the disk): line -> what it did."""
    root = tmp_path_factory.mktemp("venvs")
    with redis_server(tmp_path_factory.mktemp("redis")) as redis_url:
        with ThreadPoolExecutor(max_workers=PARALLEL_LINES) as pool:
            running = {line: pool.submit(run_line, line, root, wheel, redis_url) for line in LINES}
            done = {line: future.result() for line, future in running.items()}
    return done


def run_line(line: str, root: Path, wheel: Path, redis_url: str) -> LineRun:
    """Install the line in a fresh venv and run its programs, each from a directory outside the
    repository: the module walk (with the extra's check) first, which leaves the bytecode the
    CLI's runs then reuse; for the base line, the README's agent and the demo too."""
    try:
        python = make_venv(root / line, wheel, LINES[line])
    except AssertionError as err:
        return LineRun(error=str(err))
    cli = str(python.parent / "agent-worker")
    cwd = root / f"{line}-run"
    cwd.mkdir()
    done = LineRun(python)
    script = MODULE_WALK + EXTRA_CHECKS.get(LINES[line] or "", "")
    done.runs["modules"] = run([str(python), "-c", script], cwd, MATRIX_REDIS_URL=redis_url)
    done.runs["help"] = run([cli, "--help"], cwd)
    done.runs["worker help"] = run([cli, "worker", "--help"], cwd)
    if line == "base":
        (cwd / "agent.py").write_text(runnable_blocks()[0])
        done.runs["readme"] = run([str(python), "agent.py"], cwd)
        done.runs["user packages"] = run([str(python), "run.py"], user_team(root / "team"))
        address = f"127.0.0.1:{free_port()}"
        done.runs["demo"] = run(
            [cli, "demo", "--approve", "--address", address, "--data-dir", str(cwd / "demo"), "--headless"],
            cwd,
        )
    return done


def user_team(team: Path) -> Path:
    """A folder holding the team's own ``schemas`` and ``workflows`` packages, its agents module
    and the program that runs them (``run.py``): the folder."""
    names = {name: name for name in USER_PACKAGES}
    for name, content in USER_PACKAGES.items():
        (team / name).mkdir(parents=True)
        (team / name / "__init__.py").write_text(content)
    (team / "team_agents.py").write_text(USER_AGENTS.format(**names))
    (team / "run.py").write_text(USER_RUN.format(**names))
    return team


def run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in its venv's environment (``argv[0]`` is that venv's program) from ``cwd``."""
    venv = Path(argv[0]).parent.parent
    return subprocess.run(
        argv, cwd=cwd, env={**venv_env(venv), **env}, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )


def installed(matrix: dict[str, LineRun], line: str) -> dict[str, subprocess.CompletedProcess[str]]:
    done = matrix[line]
    assert done.python is not None, f"pip install agent-worker for the {line} line failed: {done.error}"
    return done.runs


def may_fail(module: str, line: str) -> bool:
    """Whether ``module`` may fail to import on ``line`` (it belongs to an extra the line lacks)."""
    present = set(EXTRA_MODULES) if line == "dev" else {LINES[line]}
    return any(
        module == name or module.startswith(name + ".")
        for extra, names in EXTRA_MODULES.items()
        if extra not in present
        for name in names
    )


def said(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


# ---- every line -----------------------------------------------------------------------------------


@pytest.mark.parametrize("line", list(LINES))
def test_each_install_line_runs_the_cli_and_imports_every_module_it_has(
    line: str, matrix: dict[str, LineRun]
) -> None:
    """In a fresh venv with only this line installed: both help commands exit 0, every module
    imports except (with an ImportError) those of extras the line lacks, and the line's extra
    runs what it enables."""
    runs = installed(matrix, line)
    assert runs["help"].returncode == 0 and "usage: agent-worker" in runs["help"].stdout, said(runs["help"])
    worker_help = runs["worker help"]
    assert worker_help.returncode == 0 and "--role" in worker_help.stdout, said(worker_help)
    modules = runs["modules"]
    walked = json.loads(modules.stdout.splitlines()[0]) if modules.stdout else {}
    assert walked, said(modules)
    assert walked["roots"] == ["agent_worker"], walked["roots"]
    wrong = {m: e for m, e in walked["failed"].items() if not may_fail(m, line)}
    assert not wrong, f"modules that fail to import on the {line} line: {wrong}"
    for module, error in walked["failed"].items():
        assert error.startswith(("ImportError", "ModuleNotFoundError")), (module, error)
    assert modules.returncode == 0, f"the {LINES[line]} extra's check failed: {said(modules)}"


def test_the_base_install_runs_a_scripted_task_end_to_end(matrix: dict[str, LineRun]) -> None:
    """With the base install alone, the README's minimal agent (the library: embedded server,
    worker, scripted model, an approval) and `agent-worker demo --approve` (the console script: the
    example task with a sandbox command and a business write) both run to completion."""
    runs = installed(matrix, "base")
    readme, demo = runs["readme"], runs["demo"]
    assert readme.returncode == 0 and readme.stdout.startswith("completed"), said(readme)
    assert demo.returncode == 0, said(demo)
    assert "ended completed" in demo.stdout and "confirmed by lookup: yes" in demo.stdout, said(demo)


def test_a_worker_runs_the_teams_agents_beside_its_own_schemas_and_workflows(
    matrix: dict[str, LineRun],
) -> None:
    """With the team's own packages named ``schemas`` and ``workflows`` first on the path (its
    folder, where it runs), a worker with the team's agent (loaded as ``team_agents:notes``, which
    imports both) runs a task through an approval to completion, and the team's packages are the
    ones its code sees."""
    runs = installed(matrix, "base")
    done = runs["user packages"]
    assert done.returncode == 0, said(done)
    outcome, where = done.stdout.splitlines()[-2:]
    assert outcome == "completed - Filed buy milk", said(done)
    schemas_file, workflows_file = where.split(" ")
    assert schemas_file.endswith("/team/schemas/__init__.py"), where
    assert workflows_file.endswith("/team/workflows/__init__.py"), where


# ---- static: declared imports, packaged files -----------------------------------------------------


def declared_distributions() -> set[str]:
    """Every distribution pyproject.toml names: base dependencies and every extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    return {normalized(re.split(r"[\s<>=!~\[;@]", r, maxsplit=1)[0]) for r in requirements}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def package_roots(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    return sorted({n.split("/")[0].removesuffix(".py") for n in names if ".dist-info/" not in n})


def package_dirs() -> dict[str, Path]:
    """Where each package folder of the tree lands in the wheel: ``agent_worker/`` itself, and each
    folder pyproject.toml's ``package-dir`` maps under it (``schemas/`` -> ``agent_worker/schemas/``)."""
    mapped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {"agent_worker": REPO / "agent_worker"} | {
        package.replace(".", "/"): REPO / folder for package, folder in mapped.items()
    }


def test_the_wheel_installs_one_top_level_name(wheel: Path) -> None:
    """Everything the wheel installs is under ``agent_worker`` (and its dist-info): no ``schemas``,
    ``workflows``, ``cli``, ``worker`` ... at top level, so no user module can shadow ours."""
    with zipfile.ZipFile(wheel) as archive:
        tops = {n.split("/")[0] for n in archive.namelist()}
        [dist_info] = [t for t in tops if t.endswith(".dist-info")]
        top_level = archive.read(f"{dist_info}/top_level.txt").decode().split()
    assert tops == {"agent_worker", dist_info}
    assert top_level == ["agent_worker"]


def test_every_third_party_import_is_a_declared_dependency(wheel: Path) -> None:
    """Each module outside the standard library and this package that any of our modules imports
    (at any depth, lazily or not) comes from a distribution pyproject.toml declares, not one that
    only happens to arrive with another."""
    ours = set(package_roots(wheel))
    assert ours == {"agent_worker"}
    owners = importlib.metadata.packages_distributions()
    declared = declared_distributions()
    undeclared: dict[str, str] = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for top in {name.split(".")[0] for name in names}:
                if top in sys.stdlib_module_names or top in ours or top == "__future__":
                    continue
                dists = {normalized(d) for d in owners.get(top, [])}
                if not dists & declared:
                    undeclared[top] = f"{path.relative_to(REPO)}:{node.lineno} (from {sorted(dists)})"
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_wheel_carries_every_module_and_data_file_of_the_tree(wheel: Path) -> None:
    """Every file under the package directories (code, the example's task and sheets, the inbox's
    script) is in the wheel, but for the few that are the repository's only (REPO_ONLY)."""
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    missing = [
        rel
        for path, in_wheel in _files()
        if in_wheel not in shipped and not (rel := path.relative_to(REPO).as_posix()).startswith(REPO_ONLY)
    ]
    assert not missing, f"files of the tree the wheel leaves out: {missing}"
    assert any(name.startswith("agent_worker/workflows/") for name in shipped)


def _files() -> Iterator[tuple[Path, str]]:
    """Each file of the package folders, with its name in the wheel."""
    for in_wheel, top in sorted(package_dirs().items()):
        for path in sorted(top.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path, f"{in_wheel}/{path.relative_to(top).as_posix()}"


def _sources() -> Iterator[Path]:
    return (p for p, _ in _files() if p.suffix == ".py")
