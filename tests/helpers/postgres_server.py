"""A throwaway PostgreSQL server for tests, and a TCP proxy that loses a server's answer on purpose.

``start_postgres()`` runs ``initdb`` and ``postgres`` from the local installation (as the ``postgres``
user when the tests run as root, since the server refuses to run as root) on a free port, with trust
auth and no fsync. Missing binaries are an error, never a skip: CI installs Debian's ``postgresql``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

DATABASE = "agent_worker_test"
_SERVER_USER = "postgres"


class PostgresNotInstalled(RuntimeError):
    """The PostgreSQL server binaries (``initdb``, ``postgres``) cannot be found."""


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres``: ``pg_config --bindir``, else the newest
    ``/usr/lib/postgresql/*/bin``."""
    candidates: list[Path] = []
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True)
            candidates.append(Path(out.stdout.strip()))
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += [Path(p) for p in sorted(versions, key=lambda p: int(Path(p).parent.name), reverse=True)]
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    raise PostgresNotInstalled(
        "the PostgreSQL tests need a local server installation (initdb and postgres), found none via "
        "`pg_config --bindir` or /usr/lib/postgresql/*/bin: install Debian's `postgresql` package"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", _SERVER_USER, "--", *argv] if os.geteuid() == 0 else argv


@dataclass
class PostgresServer:
    """A server on ``127.0.0.1:port`` over its own data directory, which survives ``stop()``."""

    bindir: Path
    base: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def datadir(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.base / "postgres.log"

    @property
    def dsn(self) -> str:
        return self.dsn_for(DATABASE)

    def dsn_for(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={_SERVER_USER} connect_timeout=5"

    def start(self, timeout: float = 30) -> None:
        """Start the server (again) on the same port and data directory; return once it accepts
        connections. A no-op while it runs."""
        import psycopg  # here, so a missing driver fails the PostgreSQL tests only

        if self.proc is not None and self.proc.poll() is None:
            return
        argv = [str(self.bindir / "postgres"), "-D", str(self.datadir), "-p", str(self.port)]
        argv += ["-k", str(self.base / "sock"), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                _as_server_user(argv), stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn_for("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"postgres did not start:\n{self.log.read_text()[-3000:]}") from None
                time.sleep(0.1)

    def stop(self, timeout: float = 30) -> None:
        """Fast shutdown: sessions are terminated, nothing uncommitted survives."""
        if self.proc is None:
            return
        pid_file = self.datadir / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def start_postgres() -> PostgresServer:
    """A fresh server with an empty database ``DATABASE``, in a new directory under the temp dir.

    Raises:
        PostgresNotInstalled: the server binaries are missing.
    """
    import psycopg

    bindir = find_bindir()
    base = Path(tempfile.mkdtemp(prefix="agent-worker-pg-"))
    (base / "sock").mkdir()
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam(_SERVER_USER)
        except KeyError:
            raise PostgresNotInstalled(
                f"running as root needs a {_SERVER_USER!r} user to run the server"
            ) from None
        for path in (base, base / "sock"):
            os.chown(path, user.pw_uid, user.pw_gid)
    initdb = [str(bindir / "initdb"), "-D", str(base / "data"), "-U", _SERVER_USER, "-A", "trust"]
    initdb += ["-E", "UTF8", "--no-locale", "--no-sync"]
    done = subprocess.run(_as_server_user(initdb), capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"initdb failed:\n{done.stdout}\n{done.stderr}")
    server = PostgresServer(bindir=bindir, base=base, port=_free_port())
    server.start()
    with psycopg.connect(server.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DATABASE}")
    return server


class AnswerDroppingProxy:
    """A TCP proxy to a server's port that, once armed, cuts the next connection whose client sends
    a given marker as soon as the server answers it: the request arrives, its answer never does."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cut = threading.Event()  # set once an answer was dropped
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.listen_port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, server: PostgresServer) -> str:
        return server.dsn.replace(f"port={server.port}", f"port={self.listen_port}")

    def arm(self, marker: bytes) -> None:
        """Lose the answer to the next request containing ``marker`` (once)."""
        self.cut.clear()
        with self._lock:
            self._marker = marker

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.port))
            doomed = threading.Event()
            threading.Thread(target=self._upstream, args=(client, upstream, doomed), daemon=True).start()
            threading.Thread(target=self._downstream, args=(upstream, client, doomed), daemon=True).start()

    def _upstream(self, client: socket.socket, upstream: socket.socket, doomed: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                with self._lock:
                    if self._marker is not None and self._marker in data:
                        self._marker = None
                        doomed.set()
                upstream.sendall(data)
        _hang_up(client, upstream)

    def _downstream(self, upstream: socket.socket, client: socket.socket, doomed: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if doomed.is_set():
                    self.cut.set()
                    break
                client.sendall(data)
        _hang_up(client, upstream)


def _hang_up(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
