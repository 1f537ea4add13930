"""``RedisStreamBackend``: task streams in Redis Streams (``stream_backend=redis``, extra ``redis``).

Each task's run chain is one Redis stream whose entry ids are ``0-<offset>``: a small Lua script
takes the next offsets from a counter and ``XADD``s the entries under them in one atomic step, so
writers on several hosts interleave without a gap or a duplicate, and ``XREAD`` / ``XRANGE`` after
``0-<n>`` give exactly the entries after offset ``n``. ``XADD ... MAXLEN ~`` keeps about
``stream_retention`` entries; both keys expire ``STREAM_TTL_SECONDS`` after the last append.
"""

from __future__ import annotations

import hashlib
from typing import Any

import redis
from agent_worker.activities.stores.streams import MAX_BLOCK_MS, stream_key
from agent_worker.schemas.streams import StreamEntry

# A stream nobody appends to any more goes away after a week.
STREAM_TTL_SECONDS = 7 * 24 * 3600
_FIELD = "e"

_APPEND = """
local out = {}
for i = 3, #ARGV do
  local n = redis.call('INCR', KEYS[2])
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '0-' .. n, 'e', ARGV[i])
  out[#out + 1] = n
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return out
"""


class RedisStreamBackend:
    """Task streams on the Redis server at ``url``."""

    def __init__(self, url: str, retention: int = 10_000, prefix: str = "agent-worker:stream:") -> None:
        self.retention = retention
        self.prefix = prefix
        # The socket timeout outlasts the longest blocking read.
        self._redis = redis.Redis.from_url(
            url, socket_connect_timeout=2, socket_timeout=MAX_BLOCK_MS / 1000 + 5
        )
        self._append = self._redis.register_script(_APPEND)

    def _keys(self, task_id: str, run_chain: str | None) -> tuple[str, str]:
        digest = hashlib.sha256(stream_key(task_id, run_chain).encode()).hexdigest()[:32]
        # One hash tag: both keys live in the same slot of a Redis Cluster.
        return f"{self.prefix}{{{digest}}}", f"{self.prefix}{{{digest}}}:offset"

    def append(self, task_id: str, run_chain: str | None, entries: list[StreamEntry]) -> list[int]:
        if not entries:
            return []
        return [int(n) for n in self._run_append(task_id, run_chain, entries)]

    def _run_append(
        self, task_id: str, run_chain: str | None, entries: list[StreamEntry], client: Any = None
    ) -> Any:
        """The append script for one stream, on ``client`` (a pipeline) or the connection."""
        stream, counter = self._keys(task_id, run_chain)
        args: list[Any] = [self.retention, STREAM_TTL_SECONDS, *(e.model_dump_json() for e in entries)]
        return self._append(keys=[stream, counter], args=args, client=client)

    def append_many(
        self, streams: dict[tuple[str, str | None], list[StreamEntry]]
    ) -> dict[tuple[str, str | None], list[int]]:
        """Each stream's append script in one pipeline: two round trips for the batch (redis-py asks
        whether the script is loaded, then sends the pipeline), not one per stream. Not one
        transaction (a Redis Cluster spreads the streams over slots); each stream's append is atomic."""
        streams = {k: v for k, v in streams.items() if v}
        if not streams:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        for (task_id, run_chain), entries in streams.items():
            self._run_append(task_id, run_chain, entries, client=pipe)
        answers = pipe.execute()
        return {key: [int(n) for n in got] for key, got in zip(streams, answers, strict=True)}

    def read(
        self, task_id: str, run_chain: str | None, after: int = 0, limit: int = 500, block_ms: int = 0
    ) -> list[StreamEntry]:
        stream, _ = self._keys(task_id, run_chain)
        if block_ms > 0:
            found = self._redis.xread({stream: f"0-{after}"}, count=limit, block=min(block_ms, MAX_BLOCK_MS))
            rows = found[0][1] if found else []
        else:
            rows = self._redis.xrange(stream, min=f"(0-{after}", count=limit)
        return [_entry(entry_id, fields) for entry_id, fields in rows]

    def close(self) -> None:
        self._redis.close()


def _entry(entry_id: bytes | str, fields: dict[Any, Any]) -> StreamEntry:
    raw = fields.get(_FIELD.encode()) or fields.get(_FIELD)
    offset = int((entry_id.decode() if isinstance(entry_id, bytes) else entry_id).split("-", 1)[1])
    return StreamEntry.model_validate_json(raw).model_copy(update={"offset": offset})


__all__ = ["STREAM_TTL_SECONDS", "RedisStreamBackend"]
