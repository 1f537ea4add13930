"""A reused task id starts clean: what derives from the task id (sandbox, model-call journal, event
ids, signature binding, operation keys) is keyed by the run chain (the first run id), so a new run
under the id of a terminated one shares nothing with it. On a real dev server and a real Docker
daemon."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

import docker
import pytest
from agent_worker.activities.events import JsonlEventSink
from agent_worker.activities.sandbox.docker import WORK_DIR
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.approvals import ApprovalDecision
from agent_worker.schemas.events import EventType
from agent_worker.schemas.tasks import TaskPhase, TaskResult, TaskStatus
from agent_worker.schemas.writes import operation_key
from agent_worker.security.signing import new_private_key, public_key_text, sign
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import Client, WorkflowUpdateFailedError

from tests.helpers.support import DevServer, TaskEnv, example_spec, make_config, running_worker


def _created_sandbox(status: TaskStatus) -> str:
    [created] = [e for e in status.last_events if e.type is EventType.SANDBOX_CREATED]
    return str(created.data["sandbox_id"])


def _remove_container(name: str) -> None:
    client = docker.from_env()
    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)
    with contextlib.suppress(docker.errors.NotFound):
        client.volumes.get(f"{name}-work").remove(force=True)


async def test_a_terminated_task_id_started_again_by_another_tenant_shares_nothing_with_the_old_run(
    docker_env: TaskEnv, tmp_path: Path
) -> None:
    """A task terminated while waiting for a signed approval, started again under the same id by
    another tenant, gets a new sandbox (the old run's files are not in it), its own events in the
    sink, fresh model calls (none answered from the old run's journal), refuses the old run's signed
    approval (ignored with the reason, refused by the update), and then completes with one write of
    its own on an approval signed for it."""
    env = docker_env
    keys = tmp_path / "keys"
    lead = new_private_key("finance-lead", keys)
    spec = example_spec()
    spec["policy"]["signers"] = {"finance-lead": public_key_text(lead)}
    spec["policy"]["require_signatures"] = True
    task_id = f"reused-{uuid.uuid4().hex[:8]}"
    sink = JsonlEventSink(env.config.events_dir)

    # The old run: computes in its sandbox, then waits for the approval of its write.
    old = await env.start(spec, task_id=task_id)
    [old_request] = (await env.awaiting_approval(old)).pending
    old_sandbox = _created_sandbox(await old.query(AgentTaskWorkflow.status))
    try:
        leftover = f"echo acme-only > {WORK_DIR}/leftover.txt"
        wrote = await asyncio.to_thread(
            docker.from_env().containers.get(old_sandbox).exec_run, ["sh", "-c", leftover]
        )
        assert wrote.exit_code == 0
        approval = ApprovalDecision(
            request_id=old_request.request_id,
            version=old_request.version,
            decision="approve",
            principal="finance-lead",
        )
        old_signed = approval.model_copy(
            update={"signature": sign(lead, task_id, approval, old_request.run_chain)}
        )
        old_events = list(sink.read(task_id))  # all the old run's
        assert old_events and old_events[0].data["tenant"] == "acme"
        await old.terminate("abandoned")  # no cleanup runs: its container stays behind

        # The same id again, by another tenant.
        new = await env.start({**spec, "tenant": "globex"}, task_id=task_id)
        assert new.first_execution_run_id != old.first_execution_run_id
        [request] = (await env.awaiting_approval(new)).pending
        # The same action at the same version: only the run tells the two requests apart.
        assert (request.request_id, request.version) == (old_request.request_id, old_request.version)
        status = await new.query(AgentTaskWorkflow.status)

        new_sandbox = _created_sandbox(status)
        assert new_sandbox != old_sandbox
        container = await asyncio.to_thread(docker.from_env().containers.get, new_sandbox)
        assert container.labels["agent-worker.tenant"] == "globex"
        listing = await asyncio.to_thread(container.exec_run, ["ls", "-a", WORK_DIR])
        assert b"sales_north.csv" in listing.output and b"leftover.txt" not in listing.output

        assert status.usage.model_calls >= 2 and status.usage.replayed_model_calls == 0

        stored = list(sink.read_chain(task_id, new.first_execution_run_id))
        assert stored and stored[0].type is EventType.TASK_STARTED and stored[0].data["tenant"] == "globex"
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        assert len({e.event_id for e in sink.read(task_id)}) == len(old_events) + len(stored)
        assert list(sink.read_chain(task_id, old_events[0].run_chain)) == old_events

        # The old run's signed approval: refused by the update, ignored as a signal, nothing written.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await new.execute_update(
                AgentTaskWorkflow.decide, old_signed.model_dump(mode="json", exclude_none=True)
            )
        assert "does not verify" in str(refused.value.cause)
        await new.signal(
            AgentTaskWorkflow.submit_decision, old_signed.model_dump(mode="json", exclude_none=True)
        )
        ignored = (await env.wait_status(new, lambda s: len(s.ignored) == 1)).ignored[0]
        assert "does not verify" in ignored.reason
        await asyncio.sleep(1)  # a write the refused approval set off would have started by now
        status = await new.query(AgentTaskWorkflow.status)
        assert status.phase is TaskPhase.AWAITING_APPROVAL and env.business().count() == 0

        # An approval signed for this run (the CLI reads the run chain from the pending request).
        args = ["--address", env.address, "approve", task_id, "--request", request.request_id]
        args += ["--version", request.version, "--as", "finance-lead", "--sign", "--keys-dir", str(keys)]
        assert await asyncio.to_thread(cli_main, args) == 0
        result: TaskResult = await asyncio.wait_for(new.result(), 60)
        assert result.phase is TaskPhase.COMPLETED and env.business().count() == 1
        [write] = result.evidence.writes
        call_id = request.action.call_id
        assert write.operation_key == operation_key(task_id, call_id, new.first_execution_run_id)
        assert write.operation_key != operation_key(task_id, call_id, old.first_execution_run_id)
    finally:
        await asyncio.to_thread(_remove_container, old_sandbox)


def _waiting(tenant: str) -> dict:
    """A task that waits for an approval without a sandbox, under ``tenant``."""
    rule = {"tool": "record_value", "decision": "require_approval", "approvers": ["finance-lead"]}
    return {"agent": "recorder", "prompt": "record: x", "tenant": tenant, "policy": {"rules": [rule]}}


async def test_a_reused_task_id_holds_a_place_under_its_new_tenants_cap_and_frees_the_old_one(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """With a cap of one running task per tenant: a task id terminated under `acme` and started
    again under `globex` takes globex's place (another globex task is refused) and no longer holds
    acme's (a new acme task runs)."""
    config = make_config(tmp_path / "data", tenant_caps={"acme": 1, "globex": 1})
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    task_id = f"reused-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, config):
        old = await env.start(_waiting("acme"), task_id=task_id)
        await env.awaiting_approval(old)
        await old.terminate("abandoned")  # ends without releasing its place
        new = await env.start(_waiting("globex"), task_id=task_id)
        await env.awaiting_approval(new)

        other_globex = await env.start(_waiting("globex"))
        refused = await env.wait_status(other_globex, lambda s: s.phase is not TaskPhase.RECEIVED)
        assert refused.phase is TaskPhase.REJECTED and "cap is 1" in (refused.reason or "")
        next_acme = await env.start(_waiting("acme"))
        await env.awaiting_approval(next_acme)

        for handle in (new, next_acme, other_globex):
            await env.cancel(handle)
