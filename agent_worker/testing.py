"""Testing an agent: a scripted model, and a real worker to drive the agent through.

``Script`` answers from the conversation alone (how many tool calls it has made so far), so it
gives the same answer to a retried turn or a new worker process, as the workflow needs.
``local_worker`` runs the agent the way production does: a real Temporal server (the embedded dev
server unless ``address`` is given), the real workflow and activities, on a fresh task queue and a
throwaway data dir, and yields an ``AgentWorkerClient`` to start tasks and decide approvals::

    async with local_worker([registration]) as client:
        task = await client.start({"agent": "notes", "prompt": "..."})
        result = await client.result(task.task_id)

For models with logic of their own, subclass ``ConversationModel`` and build output items with
``assistant_message`` and ``function_call`` (the OpenAI Agents SDK's testing helpers).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
import types
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import structlog
from agents.items import TResponseOutputItem
from agents.testing import assistant_message, function_call

from agent_worker.activities.agent import AgentRegistration, ConversationModel
from agent_worker.client import AgentWorkerClient

__all__ = [
    "ConversationModel",
    "Script",
    "assistant_message",
    "function_call",
    "local_worker",
]

Step = str | tuple[str, dict[str, Any]]


class Script(ConversationModel):
    """A model that plays ``steps`` in order: ``(tool_name, arguments)`` calls a tool, a string is
    the final answer. The step played is the number of tool calls already in the conversation,
    so the script resumes where the task is, whatever happened between turns.

    Example:
        ``Script(("file_note", {"text": "hi"}), "Filed.")``
    """

    def __init__(self, *steps: Step) -> None:
        if not steps or not isinstance(steps[-1], str):
            raise ValueError("a script ends with the final answer (a string)")
        self.steps = steps

    def respond(self, instructions: str | None, items: list[dict[str, Any]]) -> list[TResponseOutputItem]:
        done = sum(1 for item in items if item.get("type") == "function_call")
        step = self.steps[min(done, len(self.steps) - 1)]
        if isinstance(step, str):
            return [assistant_message(step)]
        name, arguments = step
        return [function_call(name, arguments, call_id=f"script-call-{done + 1}")]


def _registration_path(agents: Sequence[AgentRegistration | str]) -> list[str]:
    """Import paths for the worker's config: registration objects are published under a module
    made for this worker (the worker loads agents by ``module:attribute``)."""
    paths = [a for a in agents if isinstance(a, str)]
    objects = [a for a in agents if isinstance(a, AgentRegistration)]
    if objects:
        name = f"agent_worker._local_{uuid.uuid4().hex[:12]}"
        module = types.ModuleType(name)
        module.registrations = objects  # type: ignore[attr-defined]
        sys.modules[name] = module
        paths.append(f"{name}:registrations")
    return paths


async def _connect(address: str, within: float = 60.0) -> Any:
    from temporalio.client import Client

    from agent_worker.schemas.payloads import DATA_CONVERTER

    deadline = time.monotonic() + within
    while True:
        try:
            client = await Client.connect(address, data_converter=DATA_CONVERTER)
            await client.count_workflows()
            return client
        except Exception:  # the server is still starting: retry until the deadline
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


@contextlib.asynccontextmanager
async def local_worker(
    agents: Sequence[AgentRegistration | str] = (),
    *,
    address: str | None = None,
    data_dir: Path | None = None,
    **config: Any,
) -> AsyncIterator[AgentWorkerClient]:
    """A worker running ``agents`` for the block, and a client for it.

    Args:
        agents: registrations, or ``module:attribute`` import paths of registrations.
        address: a running Temporal server (its namespace needs the task search attributes, which
            the worker registers where it can). Default: start the embedded dev server for the block.
        data_dir: where the worker keeps artifacts, the business store and journals. Default: a
            temporary directory removed afterwards.
        config: further ``WorkerConfig`` fields. Defaults here: the agents' scripted models
            (``model_provider="scripted"``) and the bubblewrap process sandbox tier. Unless
            structlog is configured already, the worker's logs go to stderr, as in production.
    """
    from agent_worker.cli.devserver import free_port, start_dev_server, stop_process_group
    from agent_worker.schemas.config import WorkerConfig
    from agent_worker.telemetry import configure_logging
    from agent_worker.worker import build_workers, check_artifact_store, ensure_search_attributes

    scratch = Path(tempfile.mkdtemp(prefix="agent-worker-local-"))
    server = None
    try:
        if address is None:
            port = free_port()
            server = await asyncio.to_thread(
                start_dev_server,
                port=port,
                db_filename=scratch / "temporal.db",
                log_file=scratch / "temporal.log",
                headless=True,
            )
            address = f"127.0.0.1:{port}"
        client = await _connect(address)
        if server is None:
            await ensure_search_attributes(client)
        values: dict[str, Any] = {
            "task_queue": f"local-{uuid.uuid4().hex[:10]}",
            "data_dir": data_dir or scratch / "data",
            "model_provider": "scripted",
            "sandbox_backend": "process",
            **config,
            "agents": _registration_path(agents),
        }
        worker_config = WorkerConfig(**values)
        if not structlog.is_configured():  # the worker's logs on stderr; stdout stays the caller's
            configure_logging(worker_config)
        async with contextlib.AsyncExitStack() as running:
            store = await check_artifact_store(worker_config)
            for worker in build_workers(client, worker_config, store):
                await running.enter_async_context(worker)
            yield AgentWorkerClient(client, worker_config.task_queue)
    finally:
        if server is not None:
            await asyncio.to_thread(stop_process_group, server)
        shutil.rmtree(scratch, ignore_errors=True)
