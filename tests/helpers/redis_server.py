"""A throwaway Redis server for tests: Debian's ``redis-server`` on a free loopback port, nothing
persisted (``--save '' --appendonly no``). A missing binary is an error, never a skip: CI installs
the package (``scripts/test-machine.sh``)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from agent_worker.cli.devserver import free_port


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    """A running server for the block; its URL (``redis://127.0.0.1:PORT/0``)."""
    binary = shutil.which("redis-server")
    assert binary, "the Redis stream tests need redis-server: apt-get install redis-server"
    port = free_port()
    log = (directory / "redis.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert proc.poll() is None, (directory / "redis.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "redis-server did not answer within 10 s"
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


__all__ = ["redis_server"]
