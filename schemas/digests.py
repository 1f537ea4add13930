"""Canonical JSON and content digests.

Pure functions, safe inside workflow code: the same value gives the same bytes and the same digest on
every worker, which is what action versions, operation keys and evidence rely on.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
_DIGEST_RE = re.compile(DIGEST_PATTERN)


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` as canonical JSON: sorted keys, no spaces, UTF-8."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def digest_bytes(data: bytes) -> str:
    """Return the ``sha256:<hex>`` digest of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_json(value: Any) -> str:
    """Return the digest of the canonical JSON form of ``value``."""
    return digest_bytes(canonical_json(value))


def is_digest(value: object) -> bool:
    """Whether ``value`` is a string of the form ``sha256:<64 hex>``."""
    return isinstance(value, str) and bool(_DIGEST_RE.match(value))
