"""Signed approvals: Ed25519 signatures over exactly what a principal decided.

The signed message binds the task id, its run chain (``first_execution_run_id``, carried by every
``ApprovalRequest`` as ``run_chain``), the request id, the action version, the decision, the
principal, any edited arguments, the answer to a question and the reason (which the model sees on a
rejection or a respond), as canonical JSON with a domain prefix. So a signature cannot be moved to
another task, to a later task that reuses the id (a new run chain), to another request (a re-opened
one included), another version of the action, or other arguments; a decision sent twice finds its
request already decided. Tasks started before run chains existed (``run_chain`` None) verify the
earlier message, without it.

A task's policy registers each principal's public key (``policy.signers``) and may require
signatures (``policy.require_signatures``). Verification is deterministic (``security.ed25519``,
the ``cryptography`` package passed through the workflow sandbox), so the workflow does it itself,
in the signal handler and in the update's validator alike.

Keys live with people, not workers: ``agent-worker keys new PRINCIPAL`` writes the private key under
``~/.agent-worker/keys/`` (mode 0600) and prints the public key to put in the policy.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_worker.schemas.digests import canonical_json
from agent_worker.security import ed25519

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DOMAIN = b"agent-worker.decision/v1\n"
# With the run chain: another domain, so a message of one form can never be read as the other.
CHAIN_DOMAIN = b"agent-worker.decision/v2\n"
DEFAULT_KEY_DIR = Path.home() / ".agent-worker" / "keys"


def signed_message(task_id: str, decision: Any, run_chain: str | None = None) -> bytes:
    """The bytes a decision's signature covers (``decision`` is an ``ApprovalDecision``;
    ``run_chain`` is the request's, None only for tasks started before run chains)."""
    fields = {
        "task_id": task_id,
        "request_id": decision.request_id,
        "version": decision.version,
        "decision": decision.decision.value,
        "principal": decision.principal,
        "edited_args": decision.edited_args,
        "reason": decision.reason,
    }
    remember = getattr(decision, "remember", None)
    if remember is not None:
        # Approve-and-remember: the grant's scope is signed too (absent otherwise, so signatures made
        # before grants verify as they did).
        fields["remember"] = remember.model_dump(mode="json")
    answer = getattr(decision, "answer", None)
    if answer is not None:
        # Only when there is one: a decision of any other kind signs the message it always signed.
        fields["answer"] = answer
    if run_chain is None:
        return DOMAIN + canonical_json(fields)
    return CHAIN_DOMAIN + canonical_json({**fields, "run_chain": run_chain})


def sign(private_key: Ed25519PrivateKey, task_id: str, decision: Any, run_chain: str | None = None) -> str:
    """The base64 signature of ``decision`` for ``task_id`` and its run chain (the pending request's
    ``run_chain``)."""
    return base64.b64encode(private_key.sign(signed_message(task_id, decision, run_chain))).decode()


def public_key_text(private_key: Ed25519PrivateKey) -> str:
    """The public half, as the base64 text a policy registers."""
    from cryptography.hazmat.primitives import serialization

    raw = private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def signature_problem(
    task_id: str, decision: Any, public_key: str | None, required: bool, run_chain: str | None = None
) -> str | None:
    """Why the decision's signature does not hold, or None when it does (or none is needed).
    ``run_chain`` is the task's (None for a task started before run chains)."""
    if decision.signature is None:
        if required:
            return f"a signature is required and {decision.principal!r} sent none"
        return None
    if public_key is None:
        return f"no public key is registered for {decision.principal!r}"
    try:
        key = base64.b64decode(public_key, validate=True)
        signature = base64.b64decode(decision.signature, validate=True)
    except (ValueError, binascii.Error):
        return "the signature or the registered key is not valid base64"
    if not ed25519.verify(key, signed_message(task_id, decision, run_chain), signature):
        return (
            f"the signature does not verify for {decision.principal!r} "
            "(forged, altered, or made for another task, request or run of this task id)"
        )
    return None


def new_private_key(principal: str, key_dir: Path = DEFAULT_KEY_DIR) -> Ed25519PrivateKey:
    """Create ``principal``'s key pair, the private key saved as ``<key_dir>/<principal>.key``.

    Raises:
        FileExistsError: the principal already has a key there (never overwritten).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = key_dir / f"{principal}.key"
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with open(path, "xb") as f:  # "x": never overwrite a key
        f.write(pem)
    path.chmod(0o600)
    return key


def load_private_key(principal: str, key_dir: Path = DEFAULT_KEY_DIR) -> Ed25519PrivateKey:
    """``principal``'s private key from ``key_dir``.

    Raises:
        FileNotFoundError: there is no key for the principal.
        ValueError: the file is not an Ed25519 private key.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key((key_dir / f"{principal}.key").read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{principal}'s key is not an Ed25519 key")
    return key
