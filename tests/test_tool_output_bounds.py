"""An agent's own read tools' huge answers, on a real worker: the model reads at most a head of each.

The ``read_flooder`` agent's plain ``@function_tool``s (read tools, run inside the turn) answer
20,000,000 characters, then seven answers in one model response (multi-megabyte text, a dict the SDK
turns into text, and answers of exactly 16,000 and 16,001 characters); its own effect tool answers
20,000,000 characters (``tool.call``); and after a ``handoff()`` a specialist's own read tool
answers 20,000,000 characters. Each reaches the model as its first 16,000 characters and a note
naming the whole's digest and size; the whole is in the artifact store under that digest (and the
read tool's record names it); the task's history stays small.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from agent_worker.activities.tools.results import OUTPUT_PREVIEW_CHARS
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.client import Client

from tests.helpers.mcp_tasks import approve_next
from tests.helpers.read_flood_agent import FLOOD, HUGE, text_of
from tests.helpers.support import TEST_AGENTS, DevServer, TaskEnv, assert_replays, make_config, running_worker

AGENTS = [*TEST_AGENTS, "tests.helpers.read_flood_agent:registrations"]
# The head and the note that names the whole (its size and digest).
NOTE_CHARS = 200


async def test_huge_read_tool_outputs_reach_the_model_as_a_head_and_stay_whole_in_the_store(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """A 20,000,000-character read, a flood of large reads in one response, a 20,000,000-character
    answer of an effect tool and a specialist's 20,000,000-character read after a handoff each reach
    the model as at most 16,000 characters and a note naming the whole's digest and size; the
    artifact under that digest holds the whole (its sha256 is the digest, its text the tool's
    answer), and is the digest the read tool's record names; an answer of exactly 16,000 characters
    reaches the model whole; the model's whole input and the task's history stay bounded."""
    env = TaskEnv(
        client=client, config=make_config(tmp_path / "data", agents=AGENTS), address=dev_server.address
    )
    async with running_worker(client, env.config):
        handle = await env.start(
            {"agent": "read_flooder", "prompt": "Read it all.", "policy": {"default_approvers": ["it-lead"]}}
        )
        await approve_next(env, handle, "big_write")
        result: TaskResult = await asyncio.wait_for(handle.result(), 600)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    report = json.loads(result.final_output)
    reads = ["read-huge", *(f"flood-{i}" for i in range(len(FLOOD))), "deep-huge"]
    assert sorted(report["outputs"]) == sorted([*reads, "write-huge", "handoff"])
    too_long = {call: n for call, n in report["outputs"].items() if n > OUTPUT_PREVIEW_CHARS + NOTE_CHARS}
    assert too_long == {}
    assert report["input_chars"] < (len(reads) + 1) * (OUTPUT_PREVIEW_CHARS + NOTE_CHARS) + 20_000

    store = env.store()
    records = {record.call_id: record for record in result.evidence.tool_calls}
    # At the bound the answer is the model's whole and nothing names an artifact; one past it is cut.
    assert report["outputs"]["flood-5"] == OUTPUT_PREVIEW_CHARS
    assert report["digests"]["flood-5"] == []
    assert report["outputs"]["flood-6"] > OUTPUT_PREVIEW_CHARS + 1
    for call in (c for c in reads if c != "flood-5"):
        [digest] = report["digests"][call]
        whole = store.get(digest)
        assert f"sha256:{hashlib.sha256(whole).hexdigest()}" == digest
        assert records[call].output_digest == digest
    for call, chars in [("read-huge", HUGE), ("deep-huge", HUGE), ("write-huge", HUGE), ("flood-6", 16_001)]:
        [digest] = report["digests"][call]
        assert store.get(digest).decode() == text_of(chars)
    # The dict answer is kept as the text the model would have read whole.
    [table] = report["digests"]["flood-4"]
    assert store.get(table).decode().count(text_of(100_000)) == 30

    [effect] = result.evidence.tool_effects
    assert effect.output_digest == report["digests"]["write-huge"][0]

    history = await assert_replays(client, handle.id)
    assert len(history) < 1_000_000
