"""A per-command process cap for the ``process`` sandbox tier: a cgroup of the ``pids`` controller.

``RLIMIT_NPROC`` (``prlimit --nproc``) counts every process of the command's real uid. A worker that
runs as root drops commands to the host's real ``nobody``, so that count is shared by every sandbox
of the host (and any other ``nobody`` process): one command holding its cap leaves the others unable
to fork, and the cap is not the command's. A cgroup counts only the processes in it. Where the worker
may make cgroups (root, cgroup v1 ``pids`` hierarchy or a cgroup v2 tree with ``pids`` delegated),
each command runs in its own, ``pids.max`` = the spec's ``pids``, and what is left in it when the
command ends is killed. Elsewhere (a worker in a user namespace) ``RLIMIT_NPROC`` already counts per
command: each command has a user namespace of its own, and the count is per namespace and uid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
_BASE_NAME = "agent-worker.sandboxes"
# The command joins its cgroup before it becomes bubblewrap (``exec``), so every process it makes is in.
# On cgroup v1 it writes 0 (itself) to ``tasks``: the kernel moves one thread, the shell's only one,
# without its process-wide threadgroup lock, whose RCU grace period (cgroup.procs) cost every command
# 10-20 ms of wall time here, and stalled every fork and exit of the host meanwhile (kernel 6.18,
# `python -m bench --only long_task`: 88 against 59 ms per turn). v2 has no ``tasks``: ``cgroup.procs``.
JOIN = (
    'if [ -e "$1/tasks" ]; then echo 0 > "$1/tasks"; else echo $$ > "$1/cgroup.procs"; fi'
    ' && shift && exec "$@"'
)
# A command's cgroup left behind (its worker was killed) is removed once empty and this old: a newer
# one may be about to be joined (the moment between ``make`` and ``JOIN``).
STALE_SECONDS = 60.0
SWEEP_EVERY_SECONDS = 600.0


class PidsCgroups:
    """Makes one cgroup per command under ``base`` (a directory of the ``pids`` controller)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.swept = 0.0

    @classmethod
    def here(cls, root: Path = CGROUP_ROOT) -> PidsCgroups | None:
        """The worker's own ``pids`` cgroup's child for sandboxes, made if need be; None when this
        worker cannot make cgroups there (not root, no ``pids`` controller, a read-only mount)."""
        for base in _candidates(root):
            try:
                v2 = (base.parent / "cgroup.subtree_control").exists()
                if v2:  # the controller must be enabled for the child, and for the child's children
                    (base.parent / "cgroup.subtree_control").write_text("+pids")
                base.mkdir(exist_ok=True)
                if v2:
                    (base / "cgroup.subtree_control").write_text("+pids")
                probe = cls(base)
                path = probe.make(8)
                probe.remove(path)
            except OSError:
                continue
            return probe
        return None

    def make(self, pids: int) -> Path:
        """A new cgroup capped at ``pids`` processes (threads count too, as in ``RLIMIT_NPROC``)."""
        if time.monotonic() - self.swept > SWEEP_EVERY_SECONDS:
            self.sweep()
        path = self.base / f"cmd-{uuid.uuid4().hex[:16]}"
        path.mkdir()
        try:
            (path / "pids.max").write_text(str(pids))
        except OSError:
            path.rmdir()
            raise
        return path

    def sweep(self) -> None:
        """Remove the empty cgroups of commands whose worker died before removing them (any worker's
        of this host: an empty one older than ``STALE_SECONDS`` is no live command's)."""
        self.swept = time.monotonic()
        with contextlib.suppress(OSError):
            for path in self.base.glob("cmd-*"):
                with contextlib.suppress(OSError):
                    if time.time() - path.stat().st_mtime > STALE_SECONDS:
                        path.rmdir()  # refused while a process is in it

    @staticmethod
    def argv(path: Path, command: list[str]) -> list[str]:
        """``command`` started inside the cgroup at ``path``."""
        return ["sh", "-c", JOIN, "aw-join-cgroup", str(path), *command]

    @staticmethod
    def remove(path: Path) -> None:
        """Kill what is left in the cgroup at ``path`` and remove it (best effort)."""
        for _ in range(200):
            with contextlib.suppress(OSError):
                kill = path / "cgroup.kill"
                if kill.exists():
                    kill.write_text("1")
                else:
                    for pid in (path / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)  # its processes are still exiting
        log.warning("a sandbox command's cgroup could not be removed", cgroup=str(path))


def _candidates(root: Path) -> list[Path]:
    """Where this process's ``pids`` cgroup is, v1 then v2, each with the sandboxes' child."""
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if "pids" in controllers.split(","):
            found.append(root / "pids" / relative / _BASE_NAME)
        elif controllers == "":
            unified = root if (root / "cgroup.controllers").exists() else root / "unified"
            own = unified / relative
            with contextlib.suppress(OSError):
                if "pids" in (own / "cgroup.controllers").read_text().split():
                    found.append(own / _BASE_NAME)
    return found


__all__ = ["PidsCgroups"]
