"""``agent-worker demo``: the monthly-report example end to end.

Starts what is not running (the embedded dev server, a worker), starts the example task, shows the
pending approval with the report it would file and the command a human would type, approves it as
``finance-lead`` when ``--approve`` is given (otherwise waits for someone to decide), and prints the
completion evidence. Processes it started are stopped when it ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agent_worker.cli import devserver
from agent_worker.cli.context import CliContext
from agent_worker.cli.errors import CliError
from agent_worker.cli.tasks import DECIDE_TIMEOUT_SECONDS, Follower, load_task_input, outcome, send_decision
from agent_worker.schemas.approvals import ApprovalRequest, DecisionKind
from agent_worker.schemas.visibility import DEFAULT_TASK_QUEUE
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from agent_worker.decisions import Decision

if TYPE_CHECKING:
    from agent_worker.schemas.config import WorkerConfig

EXAMPLE = "monthly-report"


def register(sub: Any) -> None:
    """Add ``demo``."""
    demo = sub.add_parser("demo", help="run the monthly-report example end to end")
    demo.add_argument("--approve", action="store_true", help="approve as the example's approver")
    demo.add_argument("--address", dest="demo_address", default="localhost:7233")
    demo.add_argument("--data-dir", type=Path, default=Path(".agent-worker"))
    demo.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    demo.add_argument("--id", help="task id (default: demo-monthly-report-<time>)")
    demo.add_argument("--headless", action="store_true", help="start the dev server without its UI")
    demo.set_defaults(
        handler=run_demo,
        config_overrides=lambda a: {"data_dir": a.data_dir, "task_queue": a.task_queue},
    )


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise CliError(f"address {address!r} must look like host:port", 2)
    return host, int(port)


async def _has_worker(client: Client, task_queue: str) -> bool:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return bool(response.pollers)


def _start_worker(config: WorkerConfig, address: str, log_file: Path) -> subprocess.Popen[bytes]:
    from agent_worker.schemas.config import EXAMPLE_AGENT

    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "AGENT_WORKER_DATA_DIR": str(config.data_dir),
        "AGENT_WORKER_TASK_QUEUE": config.task_queue,
        # The demo's worker registers the example agent (besides any the environment names).
        "AGENT_WORKER_AGENTS": ",".join(dict.fromkeys([EXAMPLE_AGENT, *config.agents])),
    }
    if "sandbox_backend" not in config.model_fields_set:  # AGENT_WORKER_SANDBOX_BACKEND unset
        # `auto` never picks the process tier, so the demo names it on a machine without Docker and
        # the sandbox image: a developer's own machine, and the worker still proves its bubblewrap
        # isolation at start (or refuses to start, saying how to fix it).
        from agent_worker.activities.sandbox.docker import docker_available

        usable = docker_available(config.docker_image) is None
        env["AGENT_WORKER_SANDBOX_BACKEND"] = "auto" if usable else "process"
    with log_file.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "agent_worker.cli.main", "worker"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _preview(config: WorkerConfig, request: ApprovalRequest) -> str | None:
    from agent_worker.activities.errors import ArtifactError  # the stores load only when the demo runs
    from agent_worker.activities.stores.artifacts import build_artifact_store

    store = build_artifact_store(config)
    artifacts = getattr(request.action.operation, "artifacts", [])
    texts = []
    try:
        for digest in artifacts:
            try:
                texts.append(store.get(digest).decode("utf-8", "replace"))
            except ArtifactError:
                texts.append(f"(artifact {digest} is not in the artifact store)")
    finally:
        store.close()
    return "\n".join(texts) or None


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


async def run_demo(args: Any, ctx: CliContext, out: TextIO | None = None) -> int:
    """Run the demo against ``--address`` (its own option: the dev server it may start), with the
    configuration ``cli.main`` read (``--data-dir`` and ``--task-queue`` applied)."""
    out = out or sys.stdout
    config = ctx.config
    args.address = args.demo_address
    config.data_dir.mkdir(parents=True, exist_ok=True)
    host, port = _split_address(args.address)
    started: list[subprocess.Popen[bytes]] = []
    try:
        if not devserver.port_open(host, port):
            print(
                f"starting the embedded Temporal dev server on {args.address} "
                f"(db {config.data_dir / 'temporal.db'})",
                file=out,
            )
            started.append(
                devserver.start_dev_server(
                    port=port,
                    db_filename=config.data_dir / "temporal.db",
                    log_file=config.data_dir / "temporal.log",
                    headless=args.headless,
                )
            )
            if not args.headless:
                print(f"  Temporal UI: http://{host}:{port + 1000}", file=out)
        await devserver.wait_ready(args.address)
        tasks = await ctx.tasks(config.task_queue, args.address)
        client = tasks.temporal
        if not await _has_worker(client, config.task_queue):
            print(
                f"starting a worker on task queue {config.task_queue} (log {config.data_dir / 'worker.log'})",
                file=out,
            )
            started.append(_start_worker(config, args.address, config.data_dir / "worker.log"))
        task = load_task_input(None, EXAMPLE)
        task_id = args.id or f"demo-{EXAMPLE}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
        await tasks.start(task, task_id)
        print(f"started task {task_id}: {task.spec.prompt}", file=out)
        follower = Follower(tasks, task_id, out)
        status = await follower.run(stop_when_awaiting=True)
        for request in status.pending:
            preview = _preview(config, request)
            if preview:
                print(
                    "  the report it would file:\n"
                    + "\n".join(f"    | {line}" for line in preview.splitlines()),
                    file=out,
                )
            if args.approve:
                decision = Decision(
                    request_id=request.request_id,
                    kind=DecisionKind.APPROVE.value,
                    principal=request.approvers[0],
                    version=request.version,
                    reason="approved by the demo (--approve)",
                )
                answer = await send_decision(
                    tasks, task_id, decision, as_signal=False, wait_seconds=DECIDE_TIMEOUT_SECONDS
                )
                print(
                    f"approved {request.request_id} as {decision.principal}: "
                    f"{answer.detail if answer else ''}",
                    file=out,
                )
            else:
                print(
                    "waiting for a decision: run one of the commands above in another terminal "
                    "(Ctrl-C stops)",
                    file=out,
                )
        await follower.run()
        return await outcome(tasks, task_id, out)
    finally:
        _stop(started)
