"""The project's import graph (``scripts/check_imports.py``): no cycle, no import upward across the
layers, and the checker itself catches both when they are planted."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_imports.py"


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_imports", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


check_imports = _checker()


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


def _run(root: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(SCRIPT), *([str(root)] if root else [])]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def test_the_project_has_no_import_cycle_and_no_upward_import() -> None:
    """The check that ``make lint`` and ``make test`` run passes on the project as it is."""
    done = _run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no cycle, nothing upward" in done.stdout


def test_no_workflow_helper_imports_the_workflow() -> None:
    """The workflow's helpers take a ``TaskContext``: only ``workflows/__init__.py`` imports
    ``workflows.agent_task``, even for type checking."""
    importers = {
        e.source for e in check_imports.edges(ROOT) if e.target == "agent_worker.workflows.agent_task"
    }
    assert importers == {"agent_worker.workflows"}


def test_a_planted_cycle_through_a_type_only_import_fails_with_its_edges(tmp_path: Path) -> None:
    """Two workflow modules importing each other (one only under ``TYPE_CHECKING``, inside a
    function the other) exit 1, and the output names both edges with file and line."""
    root = _tree(
        tmp_path,
        {
            "workflows/__init__.py": "",
            "workflows/task.py": "def run():\n    from agent_worker.workflows.helper import Helper\n",
            "workflows/helper.py": (
                "from typing import TYPE_CHECKING\n\n"
                "if TYPE_CHECKING:\n    from agent_worker.workflows.task import Task\n"
            ),
        },
    )
    done = _run(root)
    assert done.returncode == 1, done.stdout
    helper, task = "agent_worker.workflows.helper", "agent_worker.workflows.task"
    assert f"import cycle through 2 modules: {helper}, {task}" in done.stdout
    assert f"workflows/helper.py:4: {helper} -> {task}" in done.stdout
    assert f"workflows/task.py:2: {task} -> {helper}" in done.stdout


def test_a_cycle_is_found_in_a_synthetic_graph_and_a_chain_is_not() -> None:
    """``cycles`` reports the edges of each group of modules that import one another (a self-import
    included), and nothing for a chain."""
    edge = check_imports.Edge
    chain = [edge("a", "b"), edge("b", "c"), edge("c", "d")]
    assert check_imports.cycles(chain) == []
    planted = [*chain, edge("d", "b"), edge("x", "x")]
    assert check_imports.cycles(planted) == [
        [edge("b", "c"), edge("c", "d"), edge("d", "b")],
        [edge("x", "x")],
    ]


def test_an_activity_importing_a_workflow_is_an_upward_import(tmp_path: Path) -> None:
    """``activities`` sit below ``workflows``: an activity module that imports one (relatively or
    not) fails the check, naming the edge and the layers."""
    root = _tree(
        tmp_path,
        {
            "workflows/__init__.py": "",
            "workflows/options.py": "TURN = 1\n",
            "activities/__init__.py": "",
            "activities/turn.py": "from agent_worker.workflows import options\n",
        },
    )
    done = _run(root)
    assert done.returncode == 1
    assert (
        "upward import: activities/turn.py:1: agent_worker.activities.turn -> "
        "agent_worker.workflows.options (activities (layer 2) imports workflows (layer 3))"
    ) in done.stdout


def test_schemas_importing_any_other_part_of_the_project_fails(tmp_path: Path) -> None:
    """``schemas`` are the lowest layer: importing ``telemetry`` from one is refused, importing
    another schema module (relatively) is fine."""
    root = _tree(
        tmp_path,
        {
            "schemas/__init__.py": "",
            "schemas/tasks.py": "from .events import Event\n",
            "schemas/events.py": "import agent_worker.telemetry.metrics\nEvent = 1\n",
            "telemetry/__init__.py": "",
            "telemetry/metrics.py": "",
        },
    )
    problems = check_imports.check(root)
    assert problems == [
        "upward import: schemas/events.py:1: agent_worker.schemas.events -> "
        "agent_worker.telemetry.metrics (schemas (layer 0) imports telemetry (layer 1))"
    ]


def test_workflows_importing_the_cli_or_the_inbox_fails(tmp_path: Path) -> None:
    """The edges (CLI, inbox) are above the workflows: a workflow importing either is refused."""
    root = _tree(
        tmp_path,
        {
            "workflows/__init__.py": "",
            "workflows/task.py": "import agent_worker.cli.render\nfrom agent_worker.inbox import app\n",
            "cli/__init__.py": "",
            "cli/render.py": "",
            "inbox/__init__.py": "",
            "inbox/app.py": "",
        },
    )
    problems = check_imports.check(root)
    assert [p.split(" (")[0] for p in problems] == [
        "upward import: workflows/task.py:1: agent_worker.workflows.task -> agent_worker.cli.render",
        "upward import: workflows/task.py:2: agent_worker.workflows.task -> agent_worker.inbox.app",
    ]


def test_a_module_imported_by_its_folder_name_fails(tmp_path: Path) -> None:
    """Our packages install under ``agent_worker`` only: a module of ours importing
    ``schemas.tasks`` (or ``telemetry``) by its folder's name is refused, naming the line and the
    package to use; the same imports through ``agent_worker`` pass."""
    planted = "from {0}.tasks import TaskSpec\nimport {1}\n"
    files = {
        "schemas/__init__.py": "",
        "schemas/tasks.py": "",
        "telemetry/__init__.py": "",
        "activities/__init__.py": "",
        "activities/turn.py": planted.format("schemas", "telemetry"),
    }
    problems = check_imports.check(_tree(tmp_path / "old", files))
    assert problems == [
        "activities/turn.py:1: imports schemas.tasks by its folder's name"
        " (the package is agent_worker.schemas.tasks)",
        "activities/turn.py:2: imports telemetry by its folder's name"
        " (the package is agent_worker.telemetry)",
    ]
    files["activities/turn.py"] = planted.format("agent_worker.schemas", "agent_worker.telemetry")
    assert check_imports.check(_tree(tmp_path / "new", files)) == []
