"""The worker's workflow runner (agent_worker.workflow_runner): payload contexts answered without
entering the sandbox, the same answers as the SDK's own path, and nothing left to fall back on."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.converter import ActivitySerializationContext, WorkflowSerializationContext
from temporalio.worker.workflow_sandbox import _runner as sdk_runner

from agent_worker.workflow_runner import _DirectContextInstance
from tests.helpers.support import REPO, replay_committed

EXAMPLE = REPO / "tests" / "histories" / "test_approval_by_temporal_cli_completes_with_evidence.json"


async def test_payload_contexts_are_the_sdks_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replaying the example task, every context the runner answers directly equals the one the
    SDK's sandboxed path gives for the same command, activities' contexts among them."""
    direct = _DirectContextInstance.get_serialization_context
    answers: list[Any] = []

    def compared(self: _DirectContextInstance, command_info: Any) -> Any:
        got = direct(self, command_info)
        assert got == sdk_runner._Instance.get_serialization_context(self, command_info)
        answers.append(got)
        return got

    monkeypatch.setattr(_DirectContextInstance, "get_serialization_context", compared)
    await replay_committed(EXAMPLE)
    kinds = {type(a) for a in answers}
    assert {ActivitySerializationContext, WorkflowSerializationContext} <= kinds, kinds


async def test_the_sandbox_is_not_entered_for_a_payload_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the SDK's sandboxed path made to fail, the replay still passes: the runner never falls
    back to it on this SDK (a fallback would cost the speed the runner exists for)."""

    def entered(self: Any, command_info: Any) -> Any:
        raise AssertionError("the sandbox was entered for a payload context")

    monkeypatch.setattr(sdk_runner._Instance, "get_serialization_context", entered)
    monkeypatch.setattr(sdk_runner._Instance, "get_external_store_context", entered)
    await replay_committed(EXAMPLE)
