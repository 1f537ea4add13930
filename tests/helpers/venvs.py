"""Fresh virtualenvs holding the package as a user installs it: the wheel built from this tree
(through its sdist, as an index would serve it), installed not editable, with one install line's
extras, by uv (its cache is shared by every venv and every run, so only the first run downloads).

``MODULE_WALK`` runs inside such a venv: it imports every module the installed distribution ships
and prints, as JSON, the ones that failed and why (``tests/test_install_matrix.py`` says which
may fail on which line).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.support import REPO

# What the machine's environment must not lend a venv's processes: the repository on the import
# path, another venv, our settings, a model key. Bytecode is written (unlike this machine's default)
# so that each venv compiles a module once, not once per process.
DROPPED_PREFIXES = ("AGENT_WORKER_", "TEMPORAL_", "OPENAI_", "E2B_", "AWS_", "UV_")
DROPPED = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "PYTHONSTARTUP"}
INSTALL_TIMEOUT = 600


def uv_binary() -> str:
    """uv, from the ``dev`` extra (the ``uv`` package ships the binary)."""
    from uv import find_uv_bin

    return find_uv_bin()


def uv_env() -> dict[str, str]:
    """The environment uv runs in: the machine's, never downloading a Python of its own."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("UV_") and k != "VIRTUAL_ENV"},
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
    }


def build_wheel(out: Path) -> Path:
    """Build the sdist, then the wheel from it (what ``uv build`` does), into ``out``: the wheel.

    Building from the sdist means a file the sdist leaves out is missing from the wheel too."""
    built = subprocess.run(
        [uv_binary(), "build", "--quiet", "--out-dir", str(out), str(REPO)],
        env=uv_env(),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    assert built.returncode == 0, f"building the wheel failed:\n{built.stderr[-4000:]}"
    [wheel] = out.glob("agent_worker-*.whl")
    return wheel


def make_venv(directory: Path, wheel: Path, extra: str | None) -> Path:
    """A new venv at ``directory`` with ``agent-worker[extra]`` installed from ``wheel``; its
    Python. Raises AssertionError with uv's output when the install fails."""
    uv = uv_binary()
    python = directory / "bin" / "python"
    requirement = f"agent-worker{f'[{extra}]' if extra else ''} @ {wheel.as_uri()}"
    for argv in (
        [uv, "venv", "--quiet", "--python", sys.executable, str(directory)],
        [uv, "pip", "install", "--quiet", "--python", str(python), requirement],
    ):
        done = subprocess.run(argv, env=uv_env(), capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        assert done.returncode == 0, f"{' '.join(argv[1:3])} {requirement} failed:\n{done.stderr[-4000:]}"
    return python


def venv_env(venv: Path) -> dict[str, str]:
    """The environment of a process in ``venv``: its bin first on PATH, nothing of ours."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED and not k.startswith(DROPPED_PREFIXES)}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


# Run with the venv's Python from outside the repository. Imports every module of the installed
# distribution (its top-level packages, from its RECORD); prints {module: error} as JSON. Fails at
# once if the package is imported from anywhere but the venv.
MODULE_WALK = r"""
import importlib, importlib.metadata, json, pkgutil, sys
files = importlib.metadata.distribution("agent-worker").files
roots = sorted({f.parts[0].removesuffix(".py") for f in files
                if f.suffix == ".py" and ".dist-info" not in f.parts[0] and "-" not in f.parts[0]})
failed = {}
for root in roots:
    try:
        module = importlib.import_module(root)
    except Exception as err:
        failed[root] = f"{type(err).__name__}: {err}"
        continue
    assert module.__file__.startswith(sys.prefix), f"{root} imported from {module.__file__}"
    path = getattr(module, "__path__", [])
    for info in pkgutil.walk_packages(path, root + ".", onerror=lambda name: None):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except Exception as err:
            failed[info.name] = f"{type(err).__name__}: {err}"
print(json.dumps({"roots": roots, "failed": failed}))
"""


__all__ = ["MODULE_WALK", "build_wheel", "make_venv", "uv_binary", "venv_env"]
