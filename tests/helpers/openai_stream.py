"""Server-Sent Events of the OpenAI APIs, as ``stream: true`` requests get them: the stub
(``openai_stub``) turns a complete reply (a Responses object or a chat completion) into these
chunks, so a streaming client sees the same answer arrive piece by piece.

Text is cut into words (each with its trailing space); tool calls arrive whole.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any


def words(text: str) -> list[str]:
    """``text`` in pieces that join back to it."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def responses_events(response: dict[str, Any]) -> Iterator[bytes]:
    """The Responses API's stream of ``response``: created, per output item its added / delta /
    done events, then completed (or failed, for a response whose status is ``failed``)."""
    seq = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

    started = {**copy.deepcopy(response), "status": "in_progress", "output": []}
    yield event("response.created", response=started)
    for index, item in enumerate(response.get("output", [])):
        if item.get("type") == "message":
            yield event("response.output_item.added", output_index=index, item={**item, "content": []})
            for part_index, part in enumerate(item.get("content", [])):
                text = part.get("text", "")
                ids = {"item_id": item.get("id", ""), "output_index": index, "content_index": part_index}
                yield event("response.content_part.added", **ids, part={**part, "text": ""})
                for piece in words(text):
                    yield event("response.output_text.delta", **ids, delta=piece, logprobs=[])
                yield event("response.output_text.done", **ids, text=text, logprobs=[])
                yield event("response.content_part.done", **ids, part=part)
        elif item.get("type") == "function_call":
            yield event("response.output_item.added", output_index=index, item={**item, "arguments": ""})
            ids = {"item_id": item.get("id", ""), "output_index": index}
            yield event("response.function_call_arguments.delta", **ids, delta=item.get("arguments", ""))
            yield event("response.function_call_arguments.done", **ids, arguments=item.get("arguments", ""))
        else:
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
    final = "response.failed" if response.get("status") == "failed" else "response.completed"
    yield event(final, response=response)


def chat_events(completion: dict[str, Any]) -> Iterator[bytes]:
    """The Chat Completions stream of ``completion``: a role chunk, content in words, tool calls,
    the finish reason, a usage chunk, then ``[DONE]``."""
    base = {k: completion.get(k) for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return _sse({**base, "choices": [choice]})

    [choice] = completion.get("choices") or [{"message": {}, "finish_reason": "stop"}]
    message = choice.get("message") or {}
    yield chunk({"role": "assistant", "content": ""})
    for piece in words(message.get("content") or ""):
        yield chunk({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    yield chunk({}, choice.get("finish_reason") or "stop")
    if completion.get("usage"):
        yield _sse({**base, "choices": [], "usage": completion["usage"]})
    yield b"data: [DONE]\n\n"


__all__ = ["chat_events", "responses_events", "words"]
