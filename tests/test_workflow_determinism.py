"""The workflow code, and the code of ours it runs, stays deterministic (``scripts/check_workflows.py``):
the worker passes ``workflows`` through the sandbox for speed, and our models and helpers where workflow
code imports them, so this check is what refuses a clock, a random source, I/O or shared module state
there. It passes on the tree and catches each kind when planted, in workflow code and in the modules
of ours it calls into; and the worker's runner passes only our workflow code and libraries through."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_worker.plugin import LIBRARY_PASSTHROUGH, WORKFLOW_CODE, workflow_runner

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_workflows.py"


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def test_the_workflow_code_passes() -> None:
    """The real tree passes: the workflow modules and the definitions of ours they run."""
    done = check(ROOT)
    assert done.returncode == 0, done.stdout
    assert "definitions of ours they run, deterministic" in done.stdout


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("import time\n", "imports time"),
        ("from random import choice\n", "imports random"),
        (
            "from datetime import datetime\n\ndef f():\n    return datetime.now()\n",
            "calls datetime.datetime.now()",
        ),
        ("import uuid\n", "imports uuid"),
        ("def f(u):\n    return uuid.uuid4()\n", "calls uuid.uuid4()"),
        ("def f():\n    return open('x').read()\n", "calls open()"),
        ("def f(os):\n    return os.environ['HOME']\n", "reads os.environ"),
        ("def f(workflow):\n    return workflow.patched('x')\n", "calls workflow.patched()"),
        ("SEEN = {}\n", "module-level mutable state SEEN"),
        ("CACHE: list[int] = []\n", "module-level mutable state CACHE"),
        ("from collections import defaultdict\n\nCOUNTS = defaultdict(int)\n", "mutable state COUNTS"),
    ],
)
def test_each_kind_of_offence_is_caught(tmp_path: Path, source: str, words: str) -> None:
    (tmp_path / "bad.py").write_text(source)
    done = check(tmp_path)
    assert done.returncode == 1
    assert words in done.stdout and "bad.py:" in done.stdout


def test_what_is_allowed_passes(tmp_path: Path) -> None:
    """Imports inside ``imports_passed_through``, read-only constants, ``__all__``."""
    (tmp_path / "fine.py").write_text(
        "from types import MappingProxyType\n"
        "from temporalio import workflow\n\n"
        "with workflow.unsafe.imports_passed_through():\n"
        "    import httpx\n\n"
        "LIMITS = (1, 2)\n"
        "NAMES = frozenset({'a'})\n"
        "TABLE = MappingProxyType({'a': 1})\n"
        "__all__ = ['LIMITS']\n\n"
        "def f():\n"
        "    return workflow.now()\n"
    )
    done = check(tmp_path)
    assert done.returncode == 0, done.stdout


def test_the_worker_runner_passes_only_workflow_code_and_libraries_through() -> None:
    """Of our packages, only the workflow code is passed through (for speed), and not even that with
    ``workflow_passthrough`` off; schemas, activities, telemetry, security and agent_worker never."""
    ours = {
        "agent_worker.schemas",
        "agent_worker.activities",
        "agent_worker.telemetry",
        "agent_worker.security",
        "agent_worker",
    }
    passed = workflow_runner().restrictions.passthrough_modules
    assert set(WORKFLOW_CODE) | set(LIBRARY_PASSTHROUGH) <= passed
    assert not ours & passed
    assert (
        not (ours | set(WORKFLOW_CODE)) & workflow_runner(passthrough=False).restrictions.passthrough_modules
    )


def plant(path: Path, function: str, statement: str, imports: str = "") -> None:
    """Put ``statement`` first in ``function``'s body in ``path`` (and ``imports`` after the
    ``__future__`` import)."""
    source = path.read_text()
    node = next(
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function
    )
    first = node.body[0]
    lines = source.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + statement + "\n")
    future = next(i for i, line in enumerate(lines) if line.startswith("from __future__"))
    lines.insert(future + 1, imports)
    path.write_text("".join(lines))


# (file, function, statement, imports, what the check says): five realistic offences in workflow code
# and four in code of ours that workflow code runs (a helper, a validator's module, the metrics).
PLANTED = [
    (
        "workflows/failures.py",
        "failure_code",
        "datetime.datetime.now()",
        "import datetime\n",
        "calls datetime.datetime.now()",
    ),
    (
        "workflows/threads.py",
        "first_message",
        "dt.now()",
        "from datetime import datetime as dt\n",
        "calls datetime.datetime.now()",
    ),
    (
        "workflows/decisions.py",
        "find_request",
        "Path('key.pem').read_text()",
        "from pathlib import Path\n",
        "calls .read_text()",
    ),
    ("workflows/policy.py", "evaluate", "open('rules.json')", "", "calls open()"),
    ("workflows/takeover.py", "record_takeover", "uuid.uuid4()", "import uuid\n", "calls uuid.uuid4()"),
    ("security/signing.py", "signature_problem", "time.time()", "import time\n", "calls time.time()"),
    (
        "schemas/validation.py",
        "parse_decision",
        "random.random()",
        "import random\n",
        "calls random.random()",
    ),
    ("telemetry/metrics.py", "_count", "os.environ.get('LABEL')", "import os\n", "reads os.environ"),
    (
        "activities/stores/live_events.py",
        "offer",
        "Path('spool').write_text('x')",
        "from pathlib import Path\n",
        "calls .write_text()",
    ),
]


def test_planted_offences_are_each_caught_where_workflow_code_runs_them(tmp_path: Path) -> None:
    """In a copy of the tree, each planted offence (in a workflow module, or in a function of ours a
    workflow calls) makes the check fail naming its file and what it does; the copy passes before."""
    for package in ("workflows", "schemas", "security", "telemetry", "activities"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    assert check(tmp_path).returncode == 0
    for file, function, statement, imports, _ in PLANTED:
        plant(tmp_path / file, function, statement, imports)
    done = check(tmp_path)
    assert done.returncode == 1
    for file, _, _, _, words in PLANTED:
        lines = [line for line in done.stdout.splitlines() if line.startswith(str(tmp_path / file) + ":")]
        assert any(words in line for line in lines), (file, words, done.stdout)


def test_code_of_ours_that_workflows_do_not_run_is_not_read(tmp_path: Path) -> None:
    """An activity's own I/O (run by the activity worker, never in a workflow) is not an offence."""
    for package in ("workflows", "schemas", "security", "telemetry", "activities"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    plant(tmp_path / "activities/stores/live_events.py", "register", "time.time()", "import time\n")
    done = check(tmp_path)
    assert done.returncode == 0, done.stdout
