"""Sandboxes: one interface, one module per backend, and the ``sandbox.*`` activities."""

from agent_worker.activities.sandbox.activities import SandboxActivities, SandboxHere
from agent_worker.activities.sandbox.base import Sandbox, sandbox_id_for
from agent_worker.activities.sandbox.process import ProcessSandbox

__all__ = ["ProcessSandbox", "Sandbox", "SandboxActivities", "SandboxHere", "sandbox_id_for"]
