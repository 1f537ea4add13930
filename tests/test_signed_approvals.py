"""Signed approvals: where the policy requires signatures, only a decision signed by the principal's
registered key, for this task, request and version, counts; forged, altered, replayed and unsigned
ones are ignored with the reason, and the update refuses them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_worker.cli.main import main as cli_main
from agent_worker.schemas.approvals import ApprovalDecision
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from agent_worker.security.signing import new_private_key, public_key_text, sign
from agent_worker.workflows import AgentTaskWorkflow
from temporalio.client import WorkflowUpdateFailedError

from tests.helpers.support import TaskEnv, example_spec


def signed_spec(keys: Path) -> dict:
    spec = example_spec()
    lead = new_private_key("finance-lead", keys)
    spec["policy"]["signers"] = {"finance-lead": public_key_text(lead)}
    spec["policy"]["require_signatures"] = True
    return spec


def decision(request, **changes) -> ApprovalDecision:  # type: ignore[no-untyped-def]
    fields = {
        "request_id": request.request_id,
        "version": request.version,
        "decision": "approve",
        "principal": "finance-lead",
    }
    return ApprovalDecision.model_validate({**fields, **changes})


async def test_forged_altered_replayed_and_unsigned_decisions_are_ignored(
    env: TaskEnv, tmp_path: Path
) -> None:
    """Each bad decision is ignored with its reason; the update refuses a forged one; the task keeps
    waiting, and a valid signature from the CLI then completes it."""
    from agent_worker.security.signing import load_private_key

    keys = tmp_path / "keys"
    spec = signed_spec(keys)
    lead = load_private_key("finance-lead", keys)
    mallory = new_private_key("mallory", keys)
    first, other = await asyncio.gather(env.start(spec), env.start(spec))
    [request] = (await env.awaiting_approval(first)).pending
    await env.awaiting_approval(other)

    unsigned = decision(request)
    forged = unsigned.model_copy(update={"signature": sign(mallory, first.id, unsigned)})
    genuine = unsigned.model_copy(update={"signature": sign(lead, first.id, unsigned, request.run_chain)})
    altered = genuine.model_copy(update={"reason": "approved, and wire the money elsewhere"})
    replayed = genuine  # signed for `first`, sent to `other` (same request id and version there)
    for handle, bad in ((first, unsigned), (first, forged), (first, altered), (other, replayed)):
        await handle.signal(AgentTaskWorkflow.submit_decision, bad.model_dump(mode="json", exclude_none=True))
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await first.execute_update(
            AgentTaskWorkflow.decide, forged.model_dump(mode="json", exclude_none=True)
        )
    assert "does not verify" in str(refused.value.cause)

    status = await env.wait_status(first, lambda s: len(s.ignored) == 3)
    reasons = [i.reason for i in status.ignored]
    assert "a signature is required" in reasons[0]
    assert "does not verify" in reasons[1] and "does not verify" in reasons[2]
    assert status.phase is TaskPhase.AWAITING_APPROVAL
    other_status = await env.wait_status(other, lambda s: len(s.ignored) == 1)
    assert "does not verify" in other_status.ignored[0].reason
    assert env.business().count() == 0

    args = ["--address", env.address, "approve", first.id, "--request", request.request_id]
    args += ["--version", request.version, "--as", "finance-lead", "--sign", "--keys-dir", str(keys)]
    assert await asyncio.to_thread(cli_main, args) == 0
    result: TaskResult = await asyncio.wait_for(first.result(), 60)
    assert result.phase is TaskPhase.COMPLETED and env.business().count() == 1
    assert result.evidence.approvals[0].principal == "finance-lead"
    await env.cancel(other)


def test_a_policy_requiring_signatures_needs_a_key_for_every_approver() -> None:
    """A policy that requires signatures but lacks an approver's key is refused, naming the approver."""
    from agent_worker.schemas.tasks import PolicySpec
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="finance-lead"):
        PolicySpec.model_validate(
            {
                "rules": [{"tool": "x", "decision": "require_approval", "approvers": ["finance-lead"]}],
                "require_signatures": True,
            }
        )


def test_the_verifier_accepts_genuine_signatures_and_refuses_flipped_bits_and_malformed_keys() -> None:
    """Signatures made with `cryptography` verify; a flipped bit in message, signature or key does not,
    and a key or signature of the wrong length or off the curve is refused, not raised."""
    import os

    from agent_worker.security import ed25519
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    for _ in range(20):
        key = Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        message = os.urandom(int.from_bytes(os.urandom(1), "little"))
        signature = key.sign(message)
        assert ed25519.verify(public, message, signature)
        flip = bytearray(signature)
        flip[int.from_bytes(os.urandom(1), "little") % 64] ^= 1
        assert not ed25519.verify(public, message, bytes(flip))
        assert not ed25519.verify(public, message + b"x", signature)
        other = (
            Ed25519PrivateKey.generate()
            .public_key()
            .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )
        assert not ed25519.verify(other, message, signature)
        assert not ed25519.verify(public[:31], message, signature)
        assert not ed25519.verify(public, message, signature[:63])
    # y = 2 is not on the curve: no key, and the answer is False rather than an exception.
    assert not ed25519.verify((2).to_bytes(32, "little"), b"m", bytes(64))
