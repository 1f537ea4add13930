"""A task of a capped tenant frees its place when it ends (``tenants.release``), so the next one
runs; a task of a tenant without a cap holds no place and, since patch ``lean-evidence``, ends
without asking to free one: a local activity less at the end of every uncapped task."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_worker.schemas.tasks import TaskPhase
from temporalio.client import Client, WorkflowHandle

from tests.helpers.histories import events_of, round_trips
from tests.helpers.support import DevServer, TaskEnv, make_config, running_worker


async def _local_activities(handle: WorkflowHandle) -> list[str]:
    return round_trips(events_of(await handle.fetch_history())).local_activities


async def test_a_capped_tenant_s_task_frees_its_place_and_an_uncapped_one_has_none_to_free(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """Cap 1 for `acme`: two tasks in a row both run (the first released its place at its end, a
    ``tenants.release`` in its history); a `globex` task (no cap) completes with no release."""
    config = make_config(tmp_path / "data", tenant_caps={"acme": 1})
    env = TaskEnv(client=client, config=config, address=dev_server.address)
    async with running_worker(client, config):
        for tenant, releases in (("acme", 1), ("acme", 1), ("globex", 0)):
            handle = await env.start({"agent": "counter", "prompt": "count to 2", "tenant": tenant})
            result = await asyncio.wait_for(handle.result(), 60)
            assert result.phase is TaskPhase.COMPLETED, (tenant, result.reason)
            local = await _local_activities(handle)
            assert local.count("tenants.admit") == 1, local
            assert local.count("tenants.release") == releases, (tenant, local)
