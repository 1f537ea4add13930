"""Context compaction: keep the conversation a model sees under an agent's token budget.

History stays bounded on its own (continue-as-new, outputs by reference), but the conversation the
model reads grows with every turn. When an agent has a budget (``compact_after_tokens``, on its
registration or worker-wide) and the conversation a turn would start from passes it, the turn first
compacts it:

- the conversation's first item, the task's prompt, stays as it is;
- the most recent items, up to half the budget, stay as they are; the split never separates items
  that share a ``call_id`` (a ``function_call`` and its ``function_call_output``), nor a
  ``reasoning`` item from the item it precedes;
- everything between is replaced by one user message: a summary written by one model call, made
  through the agent's own journaled, fallback-capable model chain (a retried turn answers it from
  the journal; it counts in the turn's usage).

Tokens are estimated, not counted: 4 characters of the items' compact JSON a token (no tokenizer
matches every provider; this one errs high for English prose and JSON). The instructions and tool
schemas the model also receives are not counted: leave room for them under the provider's limit.

The replaced items are stored whole in the artifact store and named among the turn's artifacts, so
the evidence still holds everything the model saw; the compacted conversation becomes the task's
conversation (the turn stores what it ran from). Compaction applies to turns that start from the
conversation; a turn that resumes a stored ``RunState`` (a handoff, within ``rebase_after_items``)
is not compacted, and the next turn that starts from the conversation is. Compaction happens
between turns: the model calls one turn makes around its read tools see that turn's items whole.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from agent_worker.activities.agent.provider_errors import no_sdk_retries
from agent_worker.activities.artifacts import ArtifactStore
from agent_worker.activities.errors import AgentError
from agent_worker.schemas.artifacts import ArtifactRef
from agent_worker.schemas.turns import CompactionRecord
from agents.models.interface import Model, ModelTracing

log = structlog.get_logger(__name__)

CHARS_PER_TOKEN = 4
# The most recent items kept verbatim fill at most this share of the budget.
KEEP_SHARE = 0.5
# The transcript the summarizer reads: each item cut to this many characters, and the whole to the
# budget (older lines dropped first, after the previous summary), so the request itself fits.
ITEM_CHARS = 4_000
SUMMARY_PREFIX = "[Summary of the earlier conversation"

INSTRUCTIONS = (
    "You compact the conversation of an agent that is in the middle of a long task. Summarize the "
    "transcript you are given so the agent can go on without it: the task's goal, what has been done "
    "(tool calls and their important results: numbers, names, file paths, identifiers, errors), "
    "decisions and their reasons, what the user asked for along the way, and what remains to do. "
    "Keep any earlier summary's facts. Answer with the summary only, as plain text."
)


def estimate_tokens(items: Any) -> int:
    """Estimated tokens of ``items`` (4 characters of their compact JSON a token)."""
    text = json.dumps(items, separators=(",", ":"), ensure_ascii=False, default=str)
    return len(text) // CHARS_PER_TOKEN


def split_point(items: list[dict[str, Any]], keep_tokens: int, head: int = 0) -> int:
    """Where the kept recent part of ``items`` begins: as many of the last items as fit in
    ``keep_tokens`` (at least one), moved earlier until no ``call_id`` has items on both sides and no
    ``reasoning`` item is parted from the item after it. Never before ``head``."""
    split, used = len(items), 0
    while split > head:
        cost = estimate_tokens(items[split - 1])
        if split < len(items) and used + cost > keep_tokens:
            break
        used += cost
        split -= 1
    first_of: dict[str, int] = {}
    for index, item in enumerate(items):
        call_id = item.get("call_id")
        if call_id is not None:
            first_of.setdefault(str(call_id), index)
    moved = True
    while moved and split > head:
        moved = False
        earliest = min(
            (first_of[str(i["call_id"])] for i in items[split:] if i.get("call_id") is not None),
            default=split,
        )
        if earliest < split:
            split, moved = earliest, True
        if split > head and items[split - 1].get("type") == "reasoning":
            split, moved = split - 1, True
    return max(split, head)


def transcript(items: list[dict[str, Any]], max_chars: int) -> str:
    """The items as text for the summarizer: one line each, cut to ``ITEM_CHARS``; past
    ``max_chars`` in all, the oldest lines after the first (an earlier summary) are left out."""
    lines = [_line(item) for item in items]
    total = sum(len(line) + 1 for line in lines)
    if total <= max_chars or len(lines) < 3:
        return "\n".join(lines)
    kept_tail: list[str] = []
    budget = max_chars - len(lines[0]) - 80
    for line in reversed(lines[1:]):
        if budget - len(line) - 1 < 0 and kept_tail:
            break
        kept_tail.append(line)
        budget -= len(line) + 1
    omitted = len(lines) - 1 - len(kept_tail)
    return "\n".join([lines[0], f"[{omitted} older items left out here]", *reversed(kept_tail)])


async def compact(
    items: list[dict[str, Any]],
    budget_tokens: int,
    model: Model,
    store: ArtifactStore,
    turn: int,
) -> tuple[list[dict[str, Any]], CompactionRecord] | None:
    """``items`` compacted under ``budget_tokens`` (see the module docstring), with its record; or
    ``None`` when they are within the budget or nothing older than the kept part is left to replace.

    Raises:
        AgentError: the model answered the summary request with no text (not retryable: the
            journal would give the same answer).
    """
    before = estimate_tokens(items)
    if before <= budget_tokens:
        return None
    head = 1 if items and _is_user_message(items[0]) else 0
    split = split_point(items, int(budget_tokens * KEEP_SHARE), head)
    older, recent = items[head:split], items[split:]
    if not older:
        log.warning(
            "conversation over its budget but nothing to compact", tokens=before, budget=budget_tokens
        )
        return None
    request = transcript(older, budget_tokens * CHARS_PER_TOKEN)
    response = await model.get_response(
        INSTRUCTIONS,
        [{"role": "user", "content": f"Transcript to summarize:\n\n{request}"}],
        no_sdk_retries(),
        [],
        None,
        [],
        ModelTracing.DISABLED,
        previous_response_id=None,
        conversation_id=None,
        prompt=None,
    )
    summary = _text_of(response.output).strip()
    if not summary:
        raise AgentError(
            "the model answered the compaction request with no text",
            operation="agent.turn",
            retryable="no",
        )
    replaced: ArtifactRef = await asyncio.to_thread(
        store.ref,
        f"conversation-turn-{turn}-compacted.json",
        json.dumps(older, ensure_ascii=False, sort_keys=True).encode(),
        "application/json",
    )
    message = {
        "role": "user",
        "content": f"{SUMMARY_PREFIX}: {len(older)} items replaced before turn {turn}; the full items "
        f"are the artifact {replaced.name}, {replaced.digest}]\n\n{summary}",
    }
    compacted = [*items[:head], message, *recent]
    record = CompactionRecord(
        budget_tokens=budget_tokens,
        items_before=len(items),
        items_after=len(compacted),
        tokens_before=before,
        tokens_after=estimate_tokens(compacted),
        replaced_items=len(older),
        replaced=replaced,
        conversation_ref=await asyncio.to_thread(store.put_json, compacted),
        summary_chars=len(summary),
    )
    if record.tokens_after > budget_tokens:
        log.warning(
            "compacted conversation still over its budget: its recent items are large",
            tokens=record.tokens_after,
            budget=budget_tokens,
        )
    return compacted, record


def _is_user_message(item: dict[str, Any]) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"


def _text_of(output: list[Any]) -> str:
    texts = []
    for item in output:
        for part in getattr(item, "content", None) or []:
            text = getattr(part, "text", None)
            if isinstance(text, str):
                texts.append(text)
    return "\n".join(texts)


def _line(item: dict[str, Any]) -> str:
    kind = item.get("type") or "message"
    if kind == "message" or "role" in item:
        text = f"{item.get('role', '?')}: {_content_text(item.get('content'))}"
    elif kind == "function_call":
        text = f"call {item.get('name')}({item.get('arguments', '')}) [{item.get('call_id')}]"
    elif kind == "function_call_output":
        text = f"output [{item.get('call_id')}]: {_content_text(item.get('output'))}"
    elif kind == "reasoning":
        text = f"reasoning: {_content_text(item.get('summary'))}"
    else:
        text = f"{kind}: {json.dumps(item, ensure_ascii=False, default=str)}"
    if len(text) > ITEM_CHARS:
        text = f"{text[:ITEM_CHARS]} [... {len(text) - ITEM_CHARS} more characters]"
    return text


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return json.dumps(content, ensure_ascii=False, default=str)


__all__ = ["CompactionRecord", "compact", "estimate_tokens", "split_point", "transcript"]
