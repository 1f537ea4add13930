"""The root of the client's errors, in a module of its own: the task client (``agent_worker.client``)
and the schedule client it hands out (``agent_worker.schedules``, ``AgentWorkerClient.schedules``)
both raise its subclasses, and neither can import the other for it without an import cycle.
``agent_worker.client`` and ``agent_worker`` export it; import it from there."""

from __future__ import annotations

__all__ = ["AgentWorkerError"]


class AgentWorkerError(Exception):
    """The root of this client's errors."""
