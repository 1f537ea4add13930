"""agent-worker as a Temporal plugin (agent_worker.AgentWorkerPlugin): a team's own temporalio
``Worker``, built with nothing of ours but the plugin, runs a task to completion; a worker on a queue
that is not ours is left as it was; and a replayer given the plugin replays a committed history."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

from agent_worker import AgentWorkerClient, AgentWorkerPlugin, TaskPhase
from tests.helpers.support import HISTORY_IDS, REPO, DevServer, make_config

EXAMPLE = REPO / "tests" / "histories" / "test_approval_by_temporal_cli_completes_with_evidence.json"


@activity.defn(name="team.hello")
async def hello(name: str) -> str:
    return f"hello {name}"


@workflow.defn(name="TeamWorkflow")
class TeamWorkflow:
    """A team's own workflow, on a queue of its own."""

    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(hello, name, start_to_close_timeout=timedelta(seconds=30))


async def test_a_teams_own_worker_with_only_the_plugin_runs_a_task(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """The plugin given to ``Client.connect`` sets the converter, and a plain ``Worker`` on the
    configured task queue, with no workflows or activities of its own, runs a scripted task (an
    agent turn, a sandbox command, the answer) to completion."""
    config = make_config(tmp_path / "data")
    plugin = AgentWorkerPlugin(config)
    own = await Client.connect(dev_server.address, plugins=[plugin])
    async with Worker(own, task_queue=config.task_queue):
        tasks = AgentWorkerClient(own, config.task_queue)
        task = await tasks.start({"agent": "shell", "prompt": "run: echo from-a-team-worker"})
        result = await asyncio.wait_for(tasks.result(task.task_id), 120)
    assert result.phase is TaskPhase.COMPLETED, result
    assert "from-a-team-worker" in (result.final_output or ""), result


async def test_a_worker_on_a_queue_not_ours_keeps_only_its_own_work(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """A worker of the same client on the team's own queue gets none of our workflows or
    activities, and runs its own workflow as before."""
    plugin = AgentWorkerPlugin(make_config(tmp_path / "data"))
    own = await Client.connect(dev_server.address, plugins=[plugin])
    queue = f"team-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        own,
        task_queue=queue,
        workflows=[TeamWorkflow],
        activities=[hello],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    assert worker.config(active_config=True)["workflows"] == [TeamWorkflow]
    assert worker.config(active_config=True)["activities"] == [hello]
    async with worker:
        answer = await own.execute_workflow(
            TeamWorkflow.run, "team", id=f"team-{uuid.uuid4()}", task_queue=queue
        )
    assert answer == "hello team"


async def test_a_replayer_given_the_plugin_replays_a_committed_history(tmp_path: Path) -> None:
    """The plugin gives a replayer our workflows, runner and converter: a committed history replays."""
    ids = json.loads((EXAMPLE.parent / HISTORY_IDS).read_text())
    history = WorkflowHistory.from_json(ids[EXAMPLE.stem], json.loads(EXAMPLE.read_text()))
    replayer = Replayer(workflows=[], plugins=[AgentWorkerPlugin(make_config(tmp_path / "data"))])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
