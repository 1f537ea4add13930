"""Sandboxes: one interface, one module per backend, and the ``sandbox.*`` activities."""

from activities.sandbox.activities import SandboxActivities, SandboxHere
from activities.sandbox.base import Sandbox, sandbox_id_for
from activities.sandbox.process import ProcessSandbox

__all__ = ["ProcessSandbox", "Sandbox", "SandboxActivities", "SandboxHere", "sandbox_id_for"]
