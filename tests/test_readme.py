"""The README's code blocks marked runnable (```python runnable) run as written, each in its own
Python process with only the repository on the import path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNNABLE = re.compile(r"^```python runnable\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def runnable_blocks() -> list[str]:
    return RUNNABLE.findall((REPO / "README.md").read_text())


def test_the_readme_has_a_runnable_minimal_agent_that_imports_only_the_public_face() -> None:
    """The README shows at least one runnable block, and its imports name only `agent_worker` (and
    the standard library's asyncio)."""
    blocks = runnable_blocks()
    assert blocks, "README.md has no ```python runnable block"
    for block in blocks:
        imported = re.findall(r"^(?:from|import) ([\w.]+)", block, re.MULTILINE)
        assert {name.split(".")[0] for name in imported} <= {"agent_worker", "asyncio"}, imported


@pytest.mark.parametrize("index", range(len(runnable_blocks())))
def test_each_runnable_readme_block_runs_an_agent_to_completion(index: int, tmp_path: Path) -> None:
    """The block exits 0 and reports a completed task: a real embedded Temporal server and worker,
    the scripted model, no network."""
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(runnable_blocks()[index])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.startswith("completed"), done.stdout + done.stderr[-2000:]
