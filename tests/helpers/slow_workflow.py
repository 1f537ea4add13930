"""A workflow whose activation blocks its thread for a given time: what a long signal backlog does to
the SDK's activation, for the deadlock-window contract test (tests/test_sdk_shims.py)."""

from __future__ import annotations

import threading

from temporalio import workflow


@workflow.defn(name="SlowActivation")
class SlowActivation:
    """Blocks its first activation for ``seconds``, then completes."""

    @workflow.run
    async def run(self, seconds: float) -> str:
        threading.Event().wait(seconds)
        return "done"


@workflow.defn(name="SandboxProbe")
class SandboxProbe:
    """Answers whether it runs inside the SDK's workflow sandbox."""

    @workflow.run
    async def run(self) -> bool:
        return workflow.unsafe.in_sandbox()
