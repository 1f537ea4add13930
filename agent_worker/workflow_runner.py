"""The workflow sandbox the worker runs workflows in: the SDK's, entered less often.

The SDK's sandboxed runner answers two questions about a workflow instance by ``exec()``-ing a code
string inside the sandbox: the serialization context of a command's payloads (asked for every
payload sequence the worker encodes or decodes) and its external-store context. Both answers are
plain reads of the instance's info and pending commands, and entering the sandbox for them (compile
the string, apply the importer's restrictions, exec) was about a fifth of the worker's Python CPU
per approval in a py-spy profile (bench/findings.md, "The workflow sandbox"). ``DirectContextRunner``
asks the sandboxed instance directly; activation and workflow code still run inside the sandbox.

This leans on the SDK's private ``_Instance`` (temporalio 1.x): where its shape has changed, an
instance falls back to the SDK's own path, so an upgrade costs speed, never correctness.
"""

from __future__ import annotations

import functools
from types import CodeType
from typing import Any

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import _runner as sdk_runner

# The name the SDK's runner gives the sandboxed instance in its globals (temporalio 1.x).
_IN_SANDBOX = "__temporal_in_sandbox"


@functools.lru_cache(maxsize=64)
def _compiled(code: str) -> CodeType:
    """``code`` compiled once (the SDK's runner execs the same few strings for every activation)."""
    return compile(code, "<string>", "exec")


class _DirectContextInstance(sdk_runner._Instance):
    """The SDK's sandboxed instance, with its context questions answered without entering the
    sandbox and its code strings compiled once."""

    def _run_code(self, code: Any, **extra_globals: Any) -> None:
        super()._run_code(_compiled(code) if isinstance(code, str) else code, **extra_globals)

    def get_serialization_context(self, command_info: Any) -> Any:
        ask = self._inside("get_serialization_context")
        return ask(command_info) if ask else super().get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        ask = self._inside("get_external_store_context")
        return ask(command_info) if ask else super().get_external_store_context(command_info)

    def _inside(self, method: str) -> Any:
        """The sandboxed instance's ``method``, or None where this SDK's shape has no such thing
        (then the SDK's own path answers)."""
        return getattr(self.globals_and_locals.get(_IN_SANDBOX), method, None)


class DirectContextRunner(SandboxedWorkflowRunner):
    """``SandboxedWorkflowRunner`` whose instances are ``_DirectContextInstance``."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _DirectContextInstance(det, self.runner_class, self.restrictions)


__all__ = ["DirectContextRunner"]
