"""Durability at the granularity of one model call.

A turn may make several model calls (read tools run between them). Each completed call's response
is journaled in shared storage (``state_backend``: files in the data dir, or PostgreSQL for a fleet),
keyed by task, turn and call index, with a digest of what the model was asked. When a turn is
retried (its worker died, the activity timed out), the calls that completed are answered from the
journal and only the call that was in flight runs again. A journal entry whose input digest no
longer matches (a read tool answered differently) is not reused.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from agent_worker.schemas.digests import digest_json
from agents.items import ModelResponse, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage, deserialize_usage, serialize_usage
from pydantic import TypeAdapter

log = structlog.get_logger(__name__)

_OUTPUT_ITEM: TypeAdapter[Any] = TypeAdapter(TResponseOutputItem)


class ModelCallJournal:
    """Completed model calls under ``root``, one small JSON file per call."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, task_id: str, turn: int, index: int) -> Path:
        task = hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:32]
        return self.root / task / f"{turn:06d}-{index:04d}.json"

    def lookup(self, task_id: str, turn: int, index: int, input_digest: str) -> ModelResponse | None:
        """The journaled response of this call, if it completed before with the same input."""
        found = self.lookup_call(task_id, turn, index, input_digest)
        return None if found is None else found[0]

    def lookup_call(
        self, task_id: str, turn: int, index: int, input_digest: str
    ) -> tuple[ModelResponse, dict[str, Any]] | None:
        """The journaled response of this call and its record (which model answered), if it
        completed before with the same input."""
        entry = self.read_entry(task_id, turn, index)
        if entry is None:
            return None
        if entry.get("input_digest") != input_digest:
            log.warning(
                "journaled model call had another input; calling the model again", turn=turn, index=index
            )
            return None
        response = ModelResponse(
            output=[_OUTPUT_ITEM.validate_python(item) for item in entry["output"]],
            usage=deserialize_usage(entry["usage"]),
            response_id=entry.get("response_id"),
        )
        return response, entry.get("call") or {}

    def record(
        self,
        task_id: str,
        turn: int,
        index: int,
        input_digest: str,
        response: ModelResponse,
        call: dict[str, Any] | None = None,
    ) -> None:
        """Journal a completed call and its ``call`` record."""
        entry = {
            "input_digest": input_digest,
            "output": [item.model_dump(mode="json", exclude_none=True) for item in response.output],
            "usage": serialize_usage(response.usage),
            "response_id": response.response_id,
            "call": call or {},
        }
        self.write_entry(task_id, turn, index, entry)

    # A backend stores entries (JSON objects) by task, turn and call index: these two are all it
    # overrides.

    def read_entry(self, task_id: str, turn: int, index: int) -> dict[str, Any] | None:
        """The stored entry of this call, or None."""
        try:
            return json.loads(self._path(task_id, turn, index).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def write_entry(self, task_id: str, turn: int, index: int, entry: dict[str, Any]) -> None:
        """Store the entry of this call (atomically: a torn write is never read back)."""
        path = self._path(task_id, turn, index)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, path)


def call_digest(system_instructions: str | None, input: Any) -> str:
    """Digest of what a model call is asked: instructions and the conversation so far."""
    items = input if isinstance(input, str) else [_plain(i) for i in input]
    return digest_json({"instructions": system_instructions, "input": items})


def _plain(item: Any) -> Any:
    return item.model_dump(mode="json", exclude_none=True) if hasattr(item, "model_dump") else item


@dataclass
class JournaledModel(Model):
    """Wraps a model: answers completed calls from the journal, journals new ones, counts usage.

    ``records`` holds one record per call: what the inner model's ``last_call`` said after it
    (which model answered, why earlier ones were skipped: ``providers.ModelChain``), kept in the
    journal too so that a replayed call reports the model that really answered it.
    """

    inner: Model
    journal: ModelCallJournal
    task_id: str
    turn: int
    calls: int = 0
    replayed: int = 0
    usage: Usage = field(default_factory=Usage)
    records: list[dict[str, Any]] = field(default_factory=list)
    # The turn's live stream (``activities.agent.streaming.TurnStream``): a call the inner model
    # did not stream (a journaled one, say) is written to it whole.
    stream: Any = None

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        index = self.calls
        digest = call_digest(system_instructions, input)
        if self.stream is not None:
            self.stream.begin_call(index)
        # In a thread: a networked journal (PostgreSQL) must not block the worker's event loop.
        found = await asyncio.to_thread(self.journal.lookup_call, self.task_id, self.turn, index, digest)
        if found is None:
            response = await self.inner.get_response(system_instructions, input, *args, **kwargs)
            call = dict(getattr(self.inner, "last_call", None) or {})
            await asyncio.to_thread(
                self.journal.record, self.task_id, self.turn, index, digest, response, call
            )
            call["replayed"] = False
        else:
            response, call = found
            call = {**call, "replayed": True}
            self.replayed += 1
        if self.stream is not None:
            self.stream.end_call(response)
        self.records.append(call)
        self.calls += 1
        self.usage.add(response.usage)
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        return self.inner.stream_response(*args, **kwargs)
