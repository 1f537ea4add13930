"""Ed25519 signature verification, written by the ``cryptography`` package (OpenSSL), usable in workflows.

Workflow code runs in Temporal's sandbox, which re-imports every module it is not told to pass
through. ``cryptography``'s native core must never be imported a second time there: it is loaded
once per process, and its Rust code imports ``cryptography.exceptions`` lazily when it reports a bad
signature (a second copy fails to load and the process aborts). So this module imports
``cryptography`` as passed through (the sandbox then shares the host's modules) and verifies with
imports passed through as well, whichever workflow runner or replayer calls it. Verification is a
pure function of its inputs (no clock, no randomness): deterministic on replay.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = ["verify"]

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s Ed25519 signature of ``message`` (RFC 8032)."""
    if len(public_key) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    with workflow.unsafe.imports_passed_through():
        try:
            Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
    return True
