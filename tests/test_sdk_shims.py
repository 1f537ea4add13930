"""Contract tests of activities/sdk_shims.py, the one place we reach past our SDKs' public surfaces:
each fails when an SDK upgrade stops honouring what the shim relies on."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_worker.activities.sdk_shims import (
    AgentWorkflowRunner,
    _DirectContextInstance,
    deadlock_window_seconds,
    handoff_agent,
    payload_passes_do_nothing,
    sdk_decode_activation,
    sdk_encode_completion,
    sdk_instance_class,
)
from agents import Agent, handoff
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.bridge import worker as sdk_bridge_worker
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    PayloadCodec,
    WorkflowSerializationContext,
)
from temporalio.worker import Replayer, Worker
from temporalio.worker import _workflow as sdk_workflow_worker
from temporalio.worker.workflow_sandbox import SandboxRestrictions

from agent_worker.plugin import DEADLOCK_WINDOW, WORKFLOWS, config_runner, workflow_runner
from agent_worker.worker import build_workers
from tests.helpers.slow_workflow import SandboxProbe, SlowActivation
from tests.helpers.support import REPO, make_config, replay_committed

EXAMPLE = REPO / "tests" / "histories" / "test_approval_by_temporal_cli_completes_with_evidence.json"
# Longer than the SDK's own 2 s deadlock window, far shorter than ours (DEADLOCK_WINDOW, 20 s).
BLOCKED_SECONDS = 3.0
# A window the blocked activation surely overruns: the control that shows the window is in force.
SHORT_WINDOW = timedelta(seconds=0.5)
# The SDK's own window (temporalio's ``_WorkflowWorker``: 2 s unless ``debug_mode``).
SDK_WINDOW = timedelta(seconds=2)


class _CountingCodec(PayloadCodec):
    """A codec that changes nothing and counts the payloads it is given."""

    def __init__(self) -> None:
        self.decoded = 0

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.decoded += len(payloads)
        return list(payloads)


def _with_codec(codec: PayloadCodec) -> DataConverter:
    """The replays' converter with ``codec``: the SDK's payload passes then run."""
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec)


def _runner(window: timedelta | None) -> AgentWorkflowRunner:
    restrictions = SandboxRestrictions.default.with_passthrough_modules("tests.helpers.slow_workflow")
    return AgentWorkflowRunner(restrictions=restrictions, deadlock_window=window)


async def test_payload_contexts_are_the_sdks_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replaying the example task with a codec (so that the SDK's payload passes run and ask each
    command's context) in the sandbox (``workflow_sandbox`` on), every context the runner answers
    directly equals the one the SDK's sandboxed path gives for the same command, activities'
    contexts among them."""
    direct = _DirectContextInstance.get_serialization_context
    answers: list[Any] = []

    def compared(self: _DirectContextInstance, command_info: Any) -> Any:
        got = direct(self, command_info)
        assert got == sdk_instance_class.get_serialization_context(self, command_info)
        answers.append(got)
        return got

    monkeypatch.setattr(_DirectContextInstance, "get_serialization_context", compared)
    await replay_committed(EXAMPLE, _with_codec(_CountingCodec()), sandboxed=True)
    kinds = {type(a) for a in answers}
    assert {ActivitySerializationContext, WorkflowSerializationContext} <= kinds, kinds


async def test_the_sandbox_is_not_entered_for_a_payload_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the SDK's sandboxed path made to fail, the replay still passes: the runner never falls
    back to it on this SDK (a fallback would cost the speed the runner exists for)."""

    def entered(self: Any, command_info: Any) -> Any:
        raise AssertionError("the sandbox was entered for a payload context")

    monkeypatch.setattr(sdk_instance_class, "get_serialization_context", entered)
    monkeypatch.setattr(sdk_instance_class, "get_external_store_context", entered)
    codec = _CountingCodec()
    await replay_committed(EXAMPLE, _with_codec(codec), sandboxed=True)
    assert codec.decoded > 0  # the passes that ask for contexts ran


async def test_an_activation_longer_than_the_sdks_window_completes_within_ours(client: Client) -> None:
    """A workflow activation blocked for 3 s (over the SDK's 2 s) completes on a worker whose runner
    carries our window, and its history replays in a replayer given the same runner: the SDK still
    reads the window we set, in workers and replayers alike."""
    queue = f"tq-{uuid.uuid4().hex[:10]}"
    runner = _runner(DEADLOCK_WINDOW)
    async with Worker(client, task_queue=queue, workflows=[SlowActivation], workflow_runner=runner) as worker:
        assert worker._workflow_worker._deadlock_timeout_seconds == DEADLOCK_WINDOW.total_seconds()
        handle = await client.start_workflow(
            SlowActivation.run, BLOCKED_SECONDS, id=f"slow-{uuid.uuid4()}", task_queue=queue
        )
        assert await handle.result() == "done"
    history = await handle.fetch_history()
    failed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert not failed, failed
    replayer = Replayer(
        workflows=[SlowActivation], data_converter=pydantic_data_converter, workflow_runner=runner
    )
    await replayer.replay_workflow(history)


async def test_a_short_window_fails_the_same_activation_as_deadlocked(client: Client) -> None:
    """The control: with a window shorter than the activation, the SDK fails its workflow task as a
    deadlock (TMPRL1101), so the window set is the one in force."""
    queue = f"tq-{uuid.uuid4().hex[:10]}"
    async with Worker(
        client, task_queue=queue, workflows=[SlowActivation], workflow_runner=_runner(SHORT_WINDOW)
    ):
        handle = await client.start_workflow(
            SlowActivation.run, BLOCKED_SECONDS, id=f"slow-{uuid.uuid4()}", task_queue=queue
        )
        failure = ""
        for _ in range(120):
            history = await handle.fetch_history()
            failed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
            if failed:
                failure = failed[0].workflow_task_failed_event_attributes.failure.message
                break
            await asyncio.sleep(0.5)
        await handle.terminate()
    assert "deadlock" in failure.lower(), failure


def test_the_worker_and_its_replays_run_with_the_deadlock_window() -> None:
    """The runner the worker runs workflows in, and replays (tests/test_replay.py, ``agent-worker
    replay``) check them with, carries ``DEADLOCK_WINDOW``."""
    assert workflow_runner().deadlock_window == DEADLOCK_WINDOW
    assert workflow_runner(passthrough=False).deadlock_window == DEADLOCK_WINDOW


async def test_the_runner_takes_only_its_own_workflows_out_of_the_sandbox(
    client: Client, tmp_path: Path
) -> None:
    """A workflow the runner lists as ``unsandboxed`` runs outside the SDK's sandbox, and the same
    workflow not listed (a user's own on our worker) inside it, through the SDK's public runner
    methods; the worker's runner lists agent-worker's workflows unless ``workflow_sandbox`` is on."""
    for unsandboxed, inside in ((frozenset({SandboxProbe}), False), (frozenset(), True)):
        runner = dataclasses.replace(_runner(None), unsandboxed=unsandboxed)
        queue = f"tq-{uuid.uuid4().hex[:10]}"
        async with Worker(client, task_queue=queue, workflows=[SandboxProbe], workflow_runner=runner):
            probe = f"probe-{uuid.uuid4()}"
            assert await client.execute_workflow(SandboxProbe.run, id=probe, task_queue=queue) is inside
    assert workflow_runner().unsandboxed == frozenset(WORKFLOWS)
    assert workflow_runner(sandboxed=True).unsandboxed == frozenset()
    assert config_runner(make_config(tmp_path / "default")).unsandboxed == frozenset(WORKFLOWS)
    assert config_runner(make_config(tmp_path / "on", workflow_sandbox=True)).unsandboxed == frozenset()


def test_a_handoffs_target_agent_is_found() -> None:
    """The agent a ``handoff()`` leads to is found, and a handoff built by hand has none."""
    specialist = Agent(name="specialist")
    assert handoff_agent(handoff(specialist)) is specialist
    custom = handoff(specialist)
    custom._agent_ref = None
    assert handoff_agent(custom) is None


async def test_the_workers_the_cli_builds_run_with_the_deadlock_window(
    client: Client, tmp_path: Path
) -> None:
    """``build_workers`` (``agent-worker worker``, and the flood test's worker process) gives the
    workflow worker ``DEADLOCK_WINDOW``, set through the plugin's runner."""
    workers = build_workers(client, make_config(tmp_path / "data"))
    assert workers[0].config(active_config=True)["workflows"]
    assert workers[0]._workflow_worker._deadlock_timeout_seconds == DEADLOCK_WINDOW.total_seconds()
    # What the worker logs at start (the flood test reads it there) is the window the SDK holds.
    assert deadlock_window_seconds(workers[0]) == DEADLOCK_WINDOW.total_seconds()
    plain = Worker(client, task_queue=f"tq-{uuid.uuid4().hex[:10]}", workflows=[SlowActivation])
    assert deadlock_window_seconds(plain) == 2.0  # the SDK's own, read from the same place


async def test_a_worker_configured_for_the_sdks_window_keeps_it(client: Client, tmp_path: Path) -> None:
    """With ``workflow_deadlock_window_seconds`` 0 (the flood test's worker), ``build_workers`` leaves
    the SDK's own window in force (2 s): nothing widens it; any other value is the window set."""
    [own, *_] = build_workers(client, make_config(tmp_path / "own", workflow_deadlock_window_seconds=0))
    assert deadlock_window_seconds(own) == SDK_WINDOW.total_seconds()
    [set_, *_] = build_workers(client, make_config(tmp_path / "set", workflow_deadlock_window_seconds=7.5))
    assert deadlock_window_seconds(set_) == 7.5


async def test_the_sdks_payload_passes_change_nothing_without_a_codec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replaying the example task, the SDK's own passes over each activation and completion, given
    the replay's converter (no codec, no external storage), leave it byte for byte as it was: what
    lets the worker skip them. An SDK whose passes start doing something there fails this test."""
    compared: Counter[str] = Counter()

    def checked(sdk_pass: Any, stand_in: Any, kind: str) -> Any:
        async def run(message: Any, data_converter: Any, *args: Any, **kwargs: Any) -> Any:
            assert payload_passes_do_nothing(data_converter)
            before = message.SerializeToString(deterministic=True)
            copy = type(message)()
            copy.CopyFrom(message)
            await sdk_pass(copy, data_converter, *args, **kwargs)
            assert copy.SerializeToString(deterministic=True) == before
            compared[kind] += 1
            compared[f"{kind} with payloads"] += b"json/plain" in before
            return await stand_in(message, data_converter, *args, **kwargs)

        return run

    decode, encode = sdk_bridge_worker.decode_activation, sdk_bridge_worker.encode_completion
    monkeypatch.setattr(
        sdk_bridge_worker, "decode_activation", checked(sdk_decode_activation, decode, "activation")
    )
    monkeypatch.setattr(
        sdk_bridge_worker, "encode_completion", checked(sdk_encode_completion, encode, "completion")
    )
    await replay_committed(EXAMPLE)
    assert compared["activation with payloads"] >= 5, compared
    assert compared["completion with payloads"] >= 5, compared


async def test_the_worker_skips_the_sdks_payload_passes_only_without_a_codec_or_storage() -> None:
    """The SDK's workflow worker looks the passes up on ``temporalio.bridge.worker`` at each
    activation, where the worker's stand-ins are; those run the SDK's own passes when the converter
    has a codec (the encryption tests run whole tasks that way), and nothing without one."""
    source = inspect.getsource(sdk_workflow_worker)
    assert "temporalio.bridge.worker.decode_activation(" in source
    assert "temporalio.bridge.worker.encode_completion(" in source
    assert sdk_bridge_worker.decode_activation is not sdk_decode_activation
    assert sdk_bridge_worker.encode_completion is not sdk_encode_completion
    activation = WorkflowActivation(run_id="r")
    signal = activation.jobs.add().signal_workflow
    signal.signal_name = "submit_decision"
    signal.input.add().data = b'"approve"'
    codec = _CountingCodec()
    with_codec = _with_codec(codec)
    await sdk_bridge_worker.decode_activation(
        activation, with_codec, decode_headers=False, storage_concurrency_limit=1
    )
    assert codec.decoded == 1
    assert not payload_passes_do_nothing(with_codec) and payload_passes_do_nothing(DataConverter.default)
