"""Many tasks, two worker processes, randomly injected write faults (lost responses, outages, worker
SIGKILLs between commit and completion), against each business backend: every task ends, every
write lands exactly once."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import time
from pathlib import Path

from agent_worker.schemas.tasks import TaskResult
from agent_worker.schemas.writes import operation_key
from temporalio.client import Client

from tests.helpers.business_backends import Backend
from tests.helpers.faults import fault_for
from tests.helpers.support import DevServer, spawn_worker
from tests.test_exactly_once import backend, business_env, recorder  # noqa: F401 - the backend fixture

TASKS = int(os.environ.get("AW_SOAK_TASKS", "200"))


async def test_many_tasks_with_random_write_faults_write_exactly_once(
    client: Client,
    dev_server: DevServer,
    tmp_path: Path,
    backend: Backend,  # noqa: F811
) -> None:
    """200 tasks: 200 rows, 0 duplicates, every task in a terminal phase (figures printed)."""
    seed = os.environ.get("AW_SOAK_FAULTS", f"random:{tmp_path.name}")
    env = business_env(client, dev_server, tmp_path, backend, seed)
    ids = [f"soak-{backend.name}-{tmp_path.name[-6:]}-{i}" for i in range(TASKS)]
    workers = [spawn_worker(env, tmp_path / f"worker-{n}.log") for n in range(2)]
    restarts = 0
    started = time.monotonic()
    handles = await asyncio.gather(
        *(env.start(recorder(f"v{n}"), task_id=task_id) for n, task_id in enumerate(ids))
    )
    # Operation keys derive from the task id and its run chain (the first run id).
    keys = [operation_key(h.id, "call_record", h.first_execution_run_id) for h in handles]
    planned = collections.Counter(fault_for(key, seed) for key in keys)
    results = asyncio.ensure_future(asyncio.gather(*(h.result() for h in handles), return_exceptions=True))
    try:
        while not results.done():
            assert time.monotonic() - started < 600, "the soak did not finish in 10 minutes"
            for n, worker in enumerate(workers):
                if worker.poll() is not None:  # a crash fault killed it: bring up another
                    restarts += 1
                    workers[n] = spawn_worker(env, tmp_path / f"worker-{n}-{restarts}.log")
            await asyncio.sleep(0.5)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                await asyncio.to_thread(worker.wait, 30)
            except subprocess.TimeoutExpired:
                worker.kill()
    outcomes: list[TaskResult | BaseException] = results.result()
    phases = collections.Counter(
        o.phase.value if isinstance(o, TaskResult) else type(o).__name__ for o in outcomes
    )
    per_key = [backend.store.count(key) for key in keys]
    rows, duplicates, missing = backend.store.count(), sum(c - 1 for c in per_key if c > 1), per_key.count(0)
    print(
        f"\nsoak [{backend.name}]: {TASKS} tasks in {time.monotonic() - started:.0f} s, "
        f"faults {dict(planned)}, worker restarts {restarts}; "
        f"rows {rows}, duplicates {duplicates}, missing {missing}; phases {dict(phases)}"
    )
    assert phases == {"completed": TASKS}
    assert (rows, duplicates, missing) == (TASKS, 0, 0)
