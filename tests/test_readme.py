"""The code blocks marked runnable (```python runnable) in the README, in "Writing an agent" and in
"Approvals" run as written, each in its own Python process with only the repository on the import path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNNABLE = re.compile(r"^```python runnable\n(.*?)^```$", re.MULTILINE | re.DOTALL)


# What the README's blocks may import; "Writing an agent" may use the SDK's MCP classes too, the
# example MCP server shipped in examples/, and the standard library's HTTP server (its model example
# serves Chat Completions on loopback itself: the docs import nothing from tests/).
README_IMPORTS = {"agent_worker", "asyncio"}
GUIDE_IMPORTS = README_IMPORTS | {"agents", "sys", "examples", "http", "json", "threading"}
GUIDE = REPO / "docs" / "writing-an-agent.md"
APPROVALS = REPO / "docs" / "approvals.md"


def runnable_blocks(path: Path = REPO / "README.md") -> list[str]:
    return RUNNABLE.findall(path.read_text())


def all_blocks() -> list[tuple[str, str]]:
    guides = [*runnable_blocks(GUIDE), *runnable_blocks(APPROVALS)]
    return [("README", b) for b in runnable_blocks()] + [("guide", b) for b in guides]


def test_the_readme_has_a_runnable_minimal_agent_that_imports_only_the_public_face() -> None:
    """The README shows at least one runnable block, and its imports name only `agent_worker` (and
    the standard library's asyncio)."""
    assert runnable_blocks(), "README.md has no ```python runnable block"
    assert len(runnable_blocks(GUIDE)) >= 3, "writing-an-agent.md lost its runnable examples"
    for where, block in all_blocks():
        imported = re.findall(r"^(?:from|import) ([\w.]+)", block, re.MULTILINE)
        allowed = README_IMPORTS if where == "README" else GUIDE_IMPORTS
        assert {name.split(".")[0] for name in imported} <= allowed, imported


@pytest.mark.parametrize("index", range(len(all_blocks())))
def test_each_runnable_readme_block_runs_an_agent_to_completion(index: int, tmp_path: Path) -> None:
    """The block exits 0 and its last line reports a completed task: a real embedded Temporal server
    and worker, the scripted model or a provider the block serves on loopback, no other network."""
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(all_blocks()[index][1])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    last = (done.stdout.splitlines() or [""])[-1]
    assert last.startswith("completed"), done.stdout + done.stderr[-2000:]
