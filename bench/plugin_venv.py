"""The official plugin's virtual environment, for benchmark 2.

Why a separate environment: temporalio 1.35's ``temporalio.contrib.openai_agents`` is only a
forwarding shim to the standalone package ``temporalio-openai-agents`` (``temporalio.openai_agents``),
which is not installed with agent-worker and pins ``openai-agents>=0.22,<0.23``; agent-worker needs
0.24 or 0.25 (its RunState schema). pip cannot install both in one environment.

How: a venv with its own site-packages holding the plugin and the openai-agents it pins
(``PINS``), layered over this project's environment for everything else (temporalio, openai,
pydantic, mcp, ...). A full resolve of the plugin in an empty venv picks exactly the versions this
project's environment has for all of those (checked 2026-11 with pip: the only two packages that
differ are the two pinned here), so the layering changes no version and takes seconds instead of
a minute. ``temporalio`` extends its package path (``pkgutil.extend_path``), so the plugin's
``temporalio.openai_agents`` is found beside the layered ``temporalio``.

The venv lives in ``bench/.plugin-venv`` (``AW_BENCH_PLUGIN_VENV`` moves it) and is reused while its
pins match.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

PINS = ("temporalio-openai-agents==1.1.0", "openai-agents==0.22.3")
DEFAULT_DIR = Path(__file__).resolve().parent / ".plugin-venv"
MARKER = "agent-worker-bench.json"
VENV_ENV = "AW_BENCH_PLUGIN_VENV"


class PluginVenvError(RuntimeError):
    """The plugin's environment could not be made (pip failed, or the plugin does not import)."""


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_ENV) or DEFAULT_DIR)


def python_of(directory: Path) -> Path:
    return directory / "bin" / "python"


def ensure() -> Path:
    """The plugin venv's Python, made (or remade) if missing or stale.

    Raises:
        PluginVenvError: pip failed or the plugin does not import there (with the output).
    """
    directory = venv_dir()
    python = python_of(directory)
    marker = directory / MARKER
    wanted = {"pins": list(PINS), "base": sys.executable}
    if python.exists() and marker.exists() and json.loads(marker.read_text()) == wanted:
        return python
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", "--clear", "--without-pip", str(directory)])
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    # Lines of a .pth file are appended to sys.path after the venv's own site-packages.
    (site / "zz_agent_worker_env.pth").write_text("\n".join(ours) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", *PINS])
    names = ("temporalio-openai-agents", "openai-agents", "temporalio")
    check = (
        "import json, temporalio.openai_agents; from importlib.metadata import version; "
        f"print(json.dumps({{n: version(n) for n in {names!r}}}))"
    )
    found = json.loads(_run([str(python), "-c", check]).strip().splitlines()[-1])
    expected = {pin.split("==")[0]: pin.split("==")[1] for pin in PINS}
    if any(found[name] != v for name, v in expected.items()):
        raise PluginVenvError(f"the plugin venv has {found}, wanted {expected}")
    marker.write_text(json.dumps(wanted))
    return python


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise PluginVenvError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


if __name__ == "__main__":
    print(ensure())
