"""Fault injection for business writes, plugged in like any custom writer
(``AGENT_WORKER_BUSINESS_WRITER=tests.helpers.faults:faulty_writer``) around the configured real adapter.

``AW_FAULTS`` picks the fault for each operation key:

- ``lost``: the write commits, then the response is lost (the caller sees ``WriteUnknown``);
- ``crash``: the write commits, then the worker process is SIGKILLed before the activity completes;
- ``down``: the system is down for the first attempt (``WriteUnavailable``; nothing applied);
- ``lookups-down``: writes work, every lookup finds the system down (confirming evidence fails);
- ``undigested-lookups-down``: as ``lookups-down``, and each receipt comes without the payload's
  digest (an adapter that cannot say what it stored), so only a lookup could confirm the write;
- ``random:SEED``: chosen from the key and the seed: ``lost`` 30%, ``down`` 30%, ``crash`` 2.5%,
  none 37.5% (crashes are rarer because each one takes a worker and its in-flight work down).

Each fault fires once per key, across processes (``AW_FAULT_DIR`` holds a marker per key), so a
retry, or the next worker, sees a healthy system.
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

from agent_worker.activities.business.base import BusinessWriter
from agent_worker.activities.errors import WriteUnavailable, WriteUnknown
from agent_worker.schemas.config import WorkerConfig
from agent_worker.schemas.writes import WriteInput, WriteReceipt

# Forty slots: one crash, twelve lost responses, twelve outages, fifteen healthy writes.
_RANDOM = ("crash",) + ("lost",) * 12 + ("down",) * 12 + ("none",) * 15


def fault_for(key: str, spec: str) -> str:
    """The fault ``spec`` assigns to ``key``."""
    if spec.startswith("random:"):
        digest = hashlib.sha256(f"{spec}/{key}".encode()).digest()
        return _RANDOM[digest[0] % len(_RANDOM)]
    return spec


class FaultyWriter:
    """Wraps a real writer and injects one fault per operation key."""

    def __init__(self, inner: BusinessWriter, spec: str, marks: Path) -> None:
        self.inner, self.spec, self.marks = inner, spec, marks
        marks.mkdir(parents=True, exist_ok=True)

    def _first_time(self, key: str) -> bool:
        try:
            (self.marks / key).touch(exist_ok=False)
            return True
        except FileExistsError:
            return False

    def write(self, input: WriteInput) -> WriteReceipt:
        fault = fault_for(input.operation_key, self.spec)
        if fault == "undigested-lookups-down":
            return self.inner.write(input).model_copy(update={"payload_digest": None})
        if fault in ("none", "lookups-down") or not self._first_time(input.operation_key):
            return self.inner.write(input)
        if fault == "down":
            raise WriteUnavailable("injected: the business system is down")
        receipt = self.inner.write(input)
        if fault == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        raise WriteUnknown(f"injected: response lost after commit ({receipt.record_id})")

    def lookup(self, operation_key: str) -> WriteReceipt | None:
        if self.spec in ("lookups-down", "undigested-lookups-down"):
            raise WriteUnavailable("injected: lookups find the business system down")
        return self.inner.lookup(operation_key)


def faulty_writer(config: WorkerConfig) -> FaultyWriter:
    """The configured adapter wrapped with the faults named by ``AW_FAULTS``."""
    from agent_worker.worker import build_writer

    inner = build_writer(config.model_copy(update={"business_writer": None}))
    return FaultyWriter(inner, os.environ.get("AW_FAULTS", "none"), Path(os.environ["AW_FAULT_DIR"]))
