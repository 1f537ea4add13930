"""``agent-worker sandbox-image``: build the default Docker sandbox image locally, offline from any
image registry.

The image is a minimal Debian (``debootstrap --variant=minbase``) with Python 3, imported with
``docker import``. Building needs root, ``debootstrap`` and a Debian package mirror; the image is
cached in the daemon (an existing tag is kept unless ``--rebuild``). Anywhere a registry is
reachable, any image with ``python3``, ``sh`` and coreutils' ``timeout`` and ``sleep`` works too:
set ``AGENT_WORKER_DOCKER_IMAGE`` (e.g. ``python:3.12-slim``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

DEFAULT_MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "coreutils")


class ImageBuildError(RuntimeError):
    """The image cannot be built here; the message says what is missing."""


def image_exists(tag: str) -> bool:
    """Whether the Docker daemon has an image called ``tag``."""
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def build_image(
    tag: str, *, suite: str = "bookworm", mirror: str = DEFAULT_MIRROR, rebuild: bool = False
) -> str:
    """Build (or keep) the sandbox image ``tag``; returns what was done.

    Raises:
        ImageBuildError: docker, debootstrap or root is missing, or a build step failed.
    """
    if shutil.which("docker") is None:
        raise ImageBuildError("the docker CLI is not installed (Debian: apt-get install docker.io)")
    if image_exists(tag) and not rebuild:
        return f"image {tag} is already built (use --rebuild to build it again)"
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildError("debootstrap is not installed (Debian: apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="aw-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        step = subprocess.run(
            [debootstrap, "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(rootfs), mirror],
            capture_output=True,
            text=True,
        )
        if step.returncode != 0:
            raise ImageBuildError(
                f"debootstrap failed: {step.stderr.strip()[-2000:] or step.stdout.strip()[-2000:]}"
            )
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [
                "docker",
                "import",
                "--change",
                'CMD ["sleep", "infinity"]',
                "--change",
                "LABEL agent-worker.image=sandbox",
                "-",
                tag,
            ],  # fmt: skip
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise ImageBuildError(f"docker import failed: {imported.stderr.strip()}")
    return f"built image {tag} ({suite}, {', '.join(PACKAGES)})"
