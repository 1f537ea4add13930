"""The worker serves Prometheus metrics: the Temporal SDK's and this package's named task metrics;
`agent-worker dev` serves the server's on a fixed port."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
import urllib.request
from argparse import Namespace
from pathlib import Path

import pytest
from agent_worker.cli.devserver import dev_command, port_open, stop_process_group
from agent_worker.cli.errors import CliError
from agent_worker.schemas.health import DoctorInput, DoctorReport, Thresholds
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow, FleetDoctorWorkflow

from tests.helpers.support import REPO, TaskEnv, example_spec, free_port, spawn_worker, worker_process

MONITORING = Path(__file__).resolve().parent.parent / "monitoring"
OURS = [
    "agent_worker_tasks_started",
    "agent_worker_tasks_finished",
    "agent_worker_phase_entered",
    "agent_worker_approvals_requested",
    "agent_worker_approvals_decided",
    "agent_worker_approval_wait_seconds",
    "agent_worker_model_calls",
    "agent_worker_model_tokens",
    "agent_worker_sandbox_exec_milliseconds",
    "agent_worker_writes",
]
# (``agent_worker_reconciliations`` counts lookups, which the example no longer makes: its write's own
# receipt confirms it, a lookup follows only an unknown outcome.)
# SDK counters a worker exports only once they first count (no miss, no series): the dashboard may
# name them because test_metrics_endpoint_reports_workflow_cache_misses_and_size finds them.
ON_OCCURRENCE = {
    "temporal_sticky_cache_miss",
    "temporal_sticky_cache_total_forced_eviction",
}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


async def scrape_until(port: int, name: str, **labels: str) -> str:
    """The endpoint's text once ``name`` (with ``labels``) counts at least 1, or after 10 s (the SDK
    exports on an interval), for the test's assertions to say what is missing."""
    text = ""
    for _ in range(50):
        text = await asyncio.to_thread(scrape, port)
        if value(text, name, **labels) >= 1:
            break
        await asyncio.sleep(0.2)
    return text


def value(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}(?:_total)?\{{(.*)\}} ([0-9.e+-]+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            total += float(match.group(2))
    return total


async def test_metrics_endpoint_serves_task_and_sdk_metrics(config_env: TaskEnv, tmp_path: Path) -> None:
    """After one approved example task (its write failing once, the business system down) the
    endpoint reports it started and completed, one approval requested and decided, model calls and
    tokens, a sandbox command, a committed write, and the SDK's own workflow and activity metrics;
    the shipped alert rules and dashboard name only metrics found there."""
    env, port = config_env, free_port()
    # The business system is down for the write's first attempt: an activity fails once (and the
    # SDK's failure counter appears), the retry writes.
    worker = spawn_worker(
        env,
        tmp_path / "worker.log",
        AGENT_WORKER_METRICS_BIND=f"127.0.0.1:{port}",
        AGENT_WORKER_BUSINESS_WRITER="tests.helpers.faults:faulty_writer",
        AW_FAULTS="down",
        AW_FAULT_DIR=str(tmp_path / "fault-marks"),
    )
    try:
        handle = await env.start(example_spec())
        [request] = (await env.awaiting_approval(handle)).pending
        # The scheduled doctor's run, with a tiny approval SLA, finds the waiting task and counts it.
        await asyncio.sleep(0.2)
        report: DoctorReport = await env.client.execute_workflow(
            FleetDoctorWorkflow.run,
            DoctorInput(thresholds=Thresholds(approval_sla_seconds=0.1), task_queue=env.task_queue),
            id=f"doctor-{handle.id}",
            task_queue=env.task_queue,
            result_type=DoctorReport,
        )
        assert {f.check for f in report.findings} == {"approval-sla"}, report.findings
        await handle.execute_update(
            AgentTaskWorkflow.decide,
            {
                "request_id": request.request_id,
                "version": request.version,
                "decision": "approve",
                "principal": "finance-lead",
            },
        )
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        assert result.phase is TaskPhase.COMPLETED
        text = await scrape_until(port, "agent_worker_tasks_finished", phase="completed")
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait, 30)
    missing = [name for name in OURS if name not in text]
    assert missing == [], missing
    # The shipped alert rules and dashboard name only metrics a worker really exports.
    exported = {
        re.sub(r"(_total|_bucket|_sum|_count)$", "", line.split("{")[0].split(" ")[0])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    for path in (MONITORING / "alerts.yml", MONITORING / "dashboard.json"):
        named = set(re.findall(r"\b((?:agent_worker|temporal)_[a-z_]+)", path.read_text()))
        unknown = sorted(
            n
            for n in named - ON_OCCURRENCE
            if re.sub(r"(_total|_bucket|_sum|_count)$", "", n) not in exported
        )
        assert unknown == [], f"{path.name} names metrics no worker exports: {unknown}"
    assert value(text, "agent_worker_tasks_started", agent="monthly-report", tenant="acme") == 1
    assert value(text, "agent_worker_doctor_findings", check="approval-sla") == 1
    assert value(text, "agent_worker_tasks_finished", phase="completed") == 1
    assert value(text, "agent_worker_approvals_requested", tool="submit_report") == 1
    assert value(text, "agent_worker_approvals_decided", decision="approve") == 1
    assert value(text, "agent_worker_model_calls", replayed="false") == result.usage.model_calls
    assert value(text, "agent_worker_model_tokens", kind="input") == result.usage.input_tokens
    assert value(text, "agent_worker_writes", outcome="committed") == 1
    assert "temporal_workflow_completed" in text or "temporal_workflow_endtoend_latency" in text


async def test_activity_log_lines_carry_the_task_context(config_env: TaskEnv, tmp_path: Path) -> None:
    """With JSON logs, every line an activity writes names the task id, run id and activity."""
    import json

    env = config_env
    log = tmp_path / "worker.log"
    worker = spawn_worker(env, log, AGENT_WORKER_LOG_FORMAT="json")
    try:
        handle = await env.start({"agent": "shell", "prompt": "run: echo hi"})
        await asyncio.wait_for(handle.result(), 60)
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait, 30)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    from_activities = [line for line in lines if line.get("activity")]
    assert from_activities, "no activity logged anything"
    assert all(line["task_id"] == handle.id and line["run_id"] for line in from_activities)
    # The task's first command creates its sandbox (``ExecInput.create``), and logs it.
    assert {"sandbox.exec"} <= {line["activity"] for line in from_activities}
    assert "sandbox ready" in {line.get("event") for line in from_activities}


async def test_metrics_endpoint_reports_workflow_cache_misses_and_size(
    config_env: TaskEnv, tmp_path: Path
) -> None:
    """With room for one cached workflow and two tasks parked for approval, approving the evicted
    one misses the cache: the endpoint reports the SDK's cache misses, hits, evictions and size."""
    env, port = config_env, free_port()
    async with worker_process(
        env,
        tmp_path / "worker.log",
        AGENT_WORKER_METRICS_BIND=f"127.0.0.1:{port}",
        AGENT_WORKER_MAX_CACHED_WORKFLOWS="1",
    ):
        first = await env.start(example_spec())
        await env.awaiting_approval(first)
        second = await env.start(example_spec())
        await env.awaiting_approval(second)
        for handle in (first, second):  # the first was evicted to make room for the second
            await env.approve(handle)
            result: TaskResult = await asyncio.wait_for(handle.result(), 60)
            assert result.phase is TaskPhase.COMPLETED
        text = await scrape_until(port, "temporal_sticky_cache_miss")
    assert all(value(text, name) >= 1 for name in ON_OCCURRENCE), text
    assert "temporal_sticky_cache_hit" in text
    sizes = [line for line in text.splitlines() if line.startswith("temporal_sticky_cache_size{")]
    assert sizes and all(float(line.rsplit(" ", 1)[1]) <= 1 for line in sizes), sizes


def test_agent_worker_dev_serves_the_server_metrics_on_its_fixed_port_or_the_one_given(
    tmp_path: Path,
) -> None:
    """`agent-worker dev` passes the server a fixed /metrics port (--port + 2000, so 9233 by default)
    instead of the random one the temporal CLI picks, and ``--metrics-port`` moves it: the real server
    answers /metrics there, and the command says where on stderr."""
    default = dev_command(
        Namespace(port=7233, metrics_port=None, ui_port=None, headless=False, db_filename=Path("t.db"))
    )
    assert default[default.index("--metrics-port") + 1] == "9233"
    with pytest.raises(CliError):
        dev_command(
            Namespace(port=64000, metrics_port=None, ui_port=None, headless=True, db_filename=Path("t.db"))
        )
    port, metrics = free_port(), free_port()
    log = tmp_path / "dev.log"
    argv = [
        sys.executable,
        "-m",
        "agent_worker.cli.main",
        "dev",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics),
    ]
    argv += ["--headless", "--db-filename", str(tmp_path / "temporal.db")]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for _ in range(600):  # until the server answers (at most about a minute)
            assert proc.poll() is None, log.read_text()
            if port_open("127.0.0.1", port) and port_open("127.0.0.1", metrics):
                break
            time.sleep(0.1)
        text = scrape(metrics)
        assert "# TYPE" in text and "persistence_requests" in text
        assert f"http://127.0.0.1:{metrics}/metrics" in log.read_text()
    finally:
        stop_process_group(proc)
