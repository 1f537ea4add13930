"""The workflow code stays deterministic without the sandbox's checks (``scripts/check_workflows.py``):
the worker passes ``workflows`` through the sandbox, so this check is what refuses a clock, a random
source, I/O or shared module state there. It passes on ``workflows/`` and catches each kind when
planted; and the worker's runner really passes our packages through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_worker.worker import PASSED_THROUGH, workflow_runner

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_workflows.py"


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def test_the_workflow_code_passes() -> None:
    done = check(ROOT / "workflows")
    assert done.returncode == 0, done.stdout
    assert "deterministic without the sandbox's checks" in done.stdout


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("import time\n", "imports time"),
        ("from random import choice\n", "imports random"),
        ("from datetime import datetime\n\ndef f():\n    return datetime.now()\n", "calls datetime.now()"),
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


def test_the_worker_runner_passes_our_packages_through() -> None:
    assert {"workflows", "schemas"} <= set(PASSED_THROUGH)
    passed = workflow_runner().restrictions.passthrough_modules
    assert set(PASSED_THROUGH) <= passed
    assert not set(PASSED_THROUGH) & workflow_runner(passthrough=False).restrictions.passthrough_modules
