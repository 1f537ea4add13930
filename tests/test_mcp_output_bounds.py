"""An MCP server's huge answers, on a real worker: the model reads at most a head of each.

The ``flood`` server (stdio, contained) answers 20,000,000 characters to a read tool inside the
turn, six multi-megabyte answers in one model response (text, twenty content items, an image,
structured content), and 20,000,000 characters to an approved write (``mcp.call``). Each reaches
the model as its first 16,000 characters and a note naming the whole's digest and size; the whole
is in the artifact store under that digest; the task's history stays small.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from agent_worker.activities.tools.results import OUTPUT_PREVIEW_CHARS
from agent_worker.schemas.tasks import TaskPhase, TaskResult
from temporalio.client import Client

from tests.helpers.mcp_flood_agent import FLOOD, HUGE
from tests.helpers.mcp_tasks import approve_next
from tests.helpers.support import TEST_AGENTS, DevServer, TaskEnv, assert_replays, make_config, running_worker

AGENTS = [*TEST_AGENTS, "tests.helpers.mcp_flood_agent:registrations"]
# The head and the note that names the whole (its size and digest).
NOTE_CHARS = 200


async def test_huge_mcp_outputs_reach_the_model_as_a_head_and_stay_whole_in_the_store(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    """A 20,000,000-character read, a flood of six large reads in one response and a
    20,000,000-character write each reach the model as at most 16,000 characters and a note naming
    the whole's digest and size; the artifact under that digest holds the whole (its sha256 is the
    digest); the model's whole input and the task's history stay bounded."""
    env = TaskEnv(
        client=client, config=make_config(tmp_path / "data", agents=AGENTS), address=dev_server.address
    )
    async with running_worker(client, env.config):
        handle = await env.start(
            {"agent": "flooder", "prompt": "Read it all.", "policy": {"default_approvers": ["it-lead"]}}
        )
        await approve_next(env, handle, "big_write")
        result: TaskResult = await asyncio.wait_for(handle.result(), 600)
    assert result.phase is TaskPhase.COMPLETED, result.reason
    report = json.loads(result.final_output)
    calls = ["read-huge", *(f"flood-{i}" for i in range(len(FLOOD))), "write-huge"]
    assert sorted(report["outputs"]) == sorted(calls)
    too_long = {call: n for call, n in report["outputs"].items() if n > OUTPUT_PREVIEW_CHARS + NOTE_CHARS}
    assert too_long == {}
    assert report["input_chars"] < len(calls) * (OUTPUT_PREVIEW_CHARS + NOTE_CHARS) + 20_000

    store = env.store()
    for call in ("read-huge", "write-huge"):
        [digest] = report["digests"][call]
        whole = store.get(digest)
        assert len(whole) == HUGE
        assert f"sha256:{hashlib.sha256(whole).hexdigest()}" == digest
    # The twenty content items of one answer are one whole, kept whole.
    [items] = report["digests"]["flood-3"]
    assert store.get(items).decode().count("m" * 200_000) == 20
    [effect] = result.evidence.tool_effects
    assert len(store.get(effect.output_digest)) == HUGE

    history = await assert_replays(client, handle.id)
    assert len(history) < 1_000_000
