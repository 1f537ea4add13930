"""What every command handler gets besides its arguments: the configuration, read once by
``cli.main``, and the way to the Temporal cluster (``--address`` / ``--namespace`` over the SDK's
environment configuration)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_worker.schemas.visibility import DEFAULT_TASK_QUEUE

if TYPE_CHECKING:
    from agent_worker.schemas.config import WorkerConfig
    from temporalio.client import Client

    from agent_worker.client import AgentWorkerClient

__all__ = ["CliContext"]


@dataclass
class CliContext:
    """The process's configuration and connection settings, passed to each command's handler.

    Args:
        config: The ``WorkerConfig`` read from the environment (and the command's own overrides),
            once, at start.
        address: ``--address``, else the SDK's environment configuration decides.
        namespace: ``--namespace``, likewise.
    """

    config: WorkerConfig
    address: str | None = None
    namespace: str | None = None

    async def temporal(self, address: str | None = None) -> Client:
        """A Temporal client with the data converter the workers use (encryption per the config)."""
        from agent_worker.connection import connect

        return await connect(
            target_host=address or self.address, namespace=self.namespace, config=self.config
        )

    async def tasks(
        self, task_queue: str = DEFAULT_TASK_QUEUE, address: str | None = None
    ) -> AgentWorkerClient:
        """The task client (``agent_worker.client``) the task commands speak through."""
        from agent_worker.client import AgentWorkerClient

        return AgentWorkerClient(await self.temporal(address), task_queue)
