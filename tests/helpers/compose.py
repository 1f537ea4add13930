"""docker-compose.temporal.yml as ``docker-compose config`` resolves it (no image is pulled), and
what its services need to run here as processes: their health checks' commands for this machine."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.helpers.support import REPO

COMPOSE_FILE = REPO / "docker-compose.temporal.yml"
INSTALL_HINT = "apt-get install -y docker-compose (CI: .ci/run installs it)"


def docker_compose() -> str:
    """The docker-compose executable; a machine without it fails these tests, never skips them."""
    found = shutil.which("docker-compose")
    assert found is not None, f"docker-compose is not installed: {INSTALL_HINT}"
    return found


def run_config(env: Mapping[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` with only ``env`` set: no developer's shell or .env file leaks in."""
    empty_env_file = tmp_path / "empty.env"
    empty_env_file.write_text("")
    return subprocess.run(
        [docker_compose(), "-f", str(COMPOSE_FILE), "--env-file", str(empty_env_file), "config"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def yaml_to_data(text: str) -> Any:
    """Parse YAML with the Python that runs docker-compose (PyYAML is one of its dependencies)."""
    with open(docker_compose(), "rb") as script:
        first_line = script.readline().decode(errors="replace")
    interpreter = shlex.split(first_line[2:]) if first_line.startswith("#!") else []
    assert interpreter and "python" in interpreter[-1], (
        f"cannot parse the config: docker-compose is not a Python script ({first_line.strip()!r})"
    )
    converted = subprocess.run(
        [*interpreter, "-c", "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert converted.returncode == 0, converted.stderr
    return json.loads(converted.stdout)


def resolve(env: Mapping[str, str], tmp_path: Path) -> dict[str, Any]:
    result = run_config(env, tmp_path)
    assert result.returncode == 0, f"docker-compose config failed:\n{result.stderr}"
    return yaml_to_data(result.stdout)


def services(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return config["services"]


def published(service: dict[str, Any]) -> set[tuple[str, int, int]]:
    """(host address, host port, container port) of each published port, in either config syntax."""
    ports = set()
    for port in service.get("ports", []):
        if isinstance(port, dict):
            ports.add((port.get("host_ip", ""), int(port["published"]), int(port["target"])))
            continue
        match = re.fullmatch(r"(?:(?P<ip>[\d.]+):)?(?P<host>\d+):(?P<target>\d+)(?:/tcp)?", port)
        assert match, f"a port without a fixed host side: {port!r}"
        ports.add((match["ip"] or "", int(match["host"]), int(match["target"])))
    return ports


def unescape(value: str) -> str:
    """What a container receives for a value of the resolved config (``$$`` stands for ``$``)."""
    return value.replace("$$", "$")


def healthcheck_argv(service: dict[str, Any], container_port: int, port: int) -> list[str]:
    """The service's CMD health check for this machine: our Python, the given port."""
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "python", f"expected a python health check, got {test}"
    assert "curl" not in " ".join(test) and "wget" not in " ".join(test)
    return [sys.executable, *(arg.replace(f":{container_port}/", f":{port}/") for arg in test[2:])]


__all__ = [
    "COMPOSE_FILE",
    "docker_compose",
    "healthcheck_argv",
    "published",
    "resolve",
    "run_config",
    "services",
    "unescape",
    "yaml_to_data",
]
