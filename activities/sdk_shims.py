"""The one place agent-worker reaches past the public surface of its SDKs, and why.

Everything else in the project uses the SDKs' public APIs only. Each name here stands in for
something the SDK has no public way to do, and each has a contract test in
``tests/test_sdk_shims.py`` that fails when an SDK upgrade stops honouring it:

- ``AgentWorkflowRunner``: the SDK's ``SandboxedWorkflowRunner`` (public, and what we subclass),
  with two private reaches:

  * payload contexts answered without entering the sandbox. The SDK's sandboxed instance (private
    ``_runner._Instance``) answers "which serialization context do this command's payloads have" by
    ``exec()``-ing a code string inside the sandbox for every payload sequence; that was a fifth of
    the worker's Python CPU per approval (bench/findings.md, "The workflow sandbox"). We ask the
    sandboxed instance directly, and compile the SDK's code strings once. Where the instance's shape
    has changed, the SDK's own path answers: an upgrade costs speed, never correctness. The payload
    passes (below) are what ask, so this speeds up workers that run them: those with a codec.
  * the deadlock window (``deadlock_window``). temporalio fails a workflow task whose activation
    runs over 2 s as deadlocked, with no public setting besides ``debug_mode`` (which turns detection
    off and runs activations inline on the event loop: not for production). A signal backlog (a
    flood of decisions) is CPU work in the SDK that can take longer on a starved worker, and its
    retry replays the same backlog, so the window is widened for workers (and replayers) built with
    this runner, through the one function ``_widen_deadlock_window``; ``deadlock_window_seconds``
    reads back the window a worker runs with (the worker logs it at start).

- payload passes skipped when they do nothing (``payload_passes_do_nothing``). temporalio
  (``temporalio.bridge.worker.decode_activation`` and ``encode_completion``) walks every workflow
  activation three times and every completion three times (codec, external storage, storage
  references) whatever the data converter, and rebuilds each payload list it meets even when nothing
  changes. With no codec and no external storage (the worker's default: no ``AGENT_WORKER_ENCRYPTION_KEYS``)
  the passes leave the message as it was, and the worker skips them: 17% less worker CPU per
  approval when the workflow cache is over-full, 6% when warm (bench/findings.md). The one
  difference: a payload stored externally that reaches a worker with no storage configured fails
  its workflow task when decoded, not at the SDK's earlier check. With a codec or storage, the SDK's
  own passes run.

- ``handoff_agent``: the agent an Agents SDK ``Handoff`` (from ``handoff()``) leads to. The SDK holds
  it by a weak reference with no public accessor (``Handoff.agent_name`` is only its name).

This module is in ``activities`` (the lowest layer that needs it) so that the agent registry can use
it; the worker, the replay helpers and the benchmarks import it from here.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import timedelta
from types import CodeType
from typing import Any

from agents import Handoff
from temporalio.bridge import worker as sdk_bridge_worker
from temporalio.converter import DataConverter
from temporalio.converter._extstore import StorageOperationMetrics
from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker import _workflow as sdk_workflow_worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import _runner as sdk_runner

__all__ = [
    "AgentWorkflowRunner",
    "deadlock_window_seconds",
    "handoff_agent",
    "payload_passes_do_nothing",
    "sdk_decode_activation",
    "sdk_encode_completion",
    "sdk_instance_class",
]

# The name the SDK's runner gives the sandboxed instance in its globals (temporalio 1.x).
_IN_SANDBOX = "__temporal_in_sandbox"
# The SDK's sandboxed instance class, for the benchmark that measures it (bench/sandbox_passthrough.py).
sdk_instance_class = sdk_runner._Instance


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


@dataclasses.dataclass(frozen=True)
class AgentWorkflowRunner(SandboxedWorkflowRunner):
    """The SDK's ``SandboxedWorkflowRunner`` with payload contexts answered outside the sandbox and,
    when ``deadlock_window`` is set, that window for the workflow activations of every worker and
    replayer it is given to (instead of the SDK's 2 s). The workflow classes in ``unsandboxed`` run
    as the SDK's ``UnsandboxedWorkflowRunner`` runs them (both through ``WorkflowRunner``'s public
    methods); any other workflow a worker is given stays in the sandbox."""

    deadlock_window: timedelta | None = None
    unsandboxed: frozenset[type] = frozenset()

    def prepare_workflow(self, defn: Any) -> None:
        if defn.cls not in self.unsandboxed:
            super().prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        if det.defn.cls in self.unsandboxed:
            return _UNSANDBOXED.create_instance(det)
        return _DirectContextInstance(det, self.runner_class, self.restrictions)


_UNSANDBOXED = UnsandboxedWorkflowRunner()


def _widen_deadlock_window(workflow_worker: Any, runner: Any) -> None:
    """Give ``workflow_worker`` (the SDK's private workflow worker of a ``Worker`` or ``Replayer``)
    ``runner``'s deadlock window, when ``runner`` is an ``AgentWorkflowRunner`` with one.

    Raises:
        RuntimeError: the SDK no longer has the attribute it reads the window from: refusing loudly
            rather than run with the 2 s window.
    """
    window = getattr(runner, "deadlock_window", None)
    if not isinstance(runner, AgentWorkflowRunner) or window is None:
        return
    if not hasattr(workflow_worker, "_deadlock_timeout_seconds"):
        raise RuntimeError("temporalio changed: its workflow worker has no deadlock window to set")
    if workflow_worker._deadlock_timeout_seconds is not None:  # None: debug mode, no detection
        workflow_worker._deadlock_timeout_seconds = window.total_seconds()


def deadlock_window_seconds(worker: Any) -> float | None:
    """The deadlock window, in seconds, that ``worker`` (a ``temporalio.worker.Worker``) runs workflow
    activations with: what the worker logs at start, so that a run's log shows the window in force.
    None when it runs no workflows or detection is off (debug mode).

    Raises:
        RuntimeError: the SDK no longer has the attribute it reads the window from.
    """
    workflow_worker = getattr(worker, "_workflow_worker", None)
    if workflow_worker is None:
        return None
    if not hasattr(workflow_worker, "_deadlock_timeout_seconds"):
        raise RuntimeError("temporalio changed: its workflow worker has no deadlock window to read")
    return workflow_worker._deadlock_timeout_seconds


# The SDK's passes over the payloads of a workflow activation (decode) and of its completion (encode),
# as temporalio defines them (``temporalio.bridge.worker``); the worker calls them through
# the stand-ins below, which skip them when ``payload_passes_do_nothing``.
sdk_decode_activation = getattr(
    sdk_bridge_worker.decode_activation, "__wrapped__", sdk_bridge_worker.decode_activation
)
sdk_encode_completion = getattr(
    sdk_bridge_worker.encode_completion, "__wrapped__", sdk_bridge_worker.encode_completion
)


def payload_passes_do_nothing(data_converter: DataConverter) -> bool:
    """Whether the SDK's payload passes leave every activation and completion as they were for
    ``data_converter``: it has no codec and no external storage (the SDK's own test of whether its
    decoding "has effect")."""
    return data_converter.payload_codec is None and data_converter.external_storage is None


def _skipped_when_they_do_nothing(sdk_pass: Any) -> Any:
    """``sdk_pass`` (the SDK's ``decode_activation`` or ``encode_completion``), skipped for a
    converter whose passes do nothing (``payload_passes_do_nothing``)."""

    @functools.wraps(sdk_pass)
    async def stand_in(message: Any, data_converter: DataConverter, *args: Any, **kwargs: Any) -> Any:
        if payload_passes_do_nothing(data_converter):
            return StorageOperationMetrics()
        return await sdk_pass(message, data_converter, *args, **kwargs)

    return stand_in


_decode_activation = _skipped_when_they_do_nothing(sdk_decode_activation)
_encode_completion = _skipped_when_they_do_nothing(sdk_encode_completion)


def _install() -> None:
    """Make the SDK's workflow worker take its runner's deadlock window once built, and call the
    payload passes' stand-ins (idempotent)."""
    sdk_bridge_worker.decode_activation = _decode_activation
    sdk_bridge_worker.encode_completion = _encode_completion
    cls = sdk_workflow_worker._WorkflowWorker
    if getattr(cls.__init__, "_agent_worker_window", False):
        return
    original = cls.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _widen_deadlock_window(self, kwargs.get("workflow_runner"))

    init._agent_worker_window = True  # type: ignore[attr-defined]
    cls.__init__ = init


_install()


def handoff_agent(item: Handoff) -> Any:
    """The agent a ``Handoff`` made by the Agents SDK's ``handoff()`` leads to, or None when it is
    gone or the handoff was built by hand (no target recorded)."""
    ref = getattr(item, "_agent_ref", None)
    return ref() if callable(ref) else None
