"""A user's own agent, from its own module, registered by configuration alone, runs end to end in a
worker process: read tool inline, write tool through policy, approval and one write."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.workflows import AgentTaskWorkflow

from tests.helpers.support import TaskEnv, spawn_worker


async def test_agent_registered_by_config_runs_end_to_end(config_env: TaskEnv, tmp_path: Path) -> None:
    """AGENT_WORKER_AGENTS names the module; the worker loads it and nothing else; the task waits for
    the default approver and files exactly one invoice."""
    env = config_env
    agents = "tests.helpers.user_agents:registration"
    worker = spawn_worker(env, tmp_path / "worker.log", AGENT_WORKER_AGENTS=agents)
    try:
        spec = {
            "agent": "invoicer",
            "prompt": "Invoice acme for the November retainer.",
            "policy": {"default_approvers": ["billing-clerk"]},
        }
        handle = await env.start(spec)
        [request] = (await env.awaiting_approval(handle)).pending
        assert request.action.tool == "file_invoice"
        assert request.action.arguments == {"customer_id": "C-001", "amount": "1200.00", "terms_days": 30}
        assert request.approvers == ["billing-clerk"]
        await handle.signal(
            AgentTaskWorkflow.submit_decision,
            {
                "request_id": request.request_id,
                "version": request.version,
                "decision": "approve",
                "principal": "billing-clerk",
            },
        )
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        # The example agents are not loaded on this worker: configuration decides.
        other = await env.start({"agent": "monthly-report", "prompt": "x"})
        status = await env.wait_status(other, lambda s: s.phase.terminal)
        assert status.phase is TaskPhase.FAILED and "unknown agent 'monthly-report'" in (status.reason or "")
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait, 30)
    assert result.phase is TaskPhase.COMPLETED
    [write] = result.evidence.writes
    assert result.final_output == f"invoice filed as {write.receipt.record_id}"
    assert write.confirmed is True and env.business().count() == 1
