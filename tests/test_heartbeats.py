"""Heartbeats: an activity done within the beat interval sends none (each beat is an RPC and a write
on the server); longer work beats every interval; details a retry needs (a sandbox command's home
queue, ``heartbeat_note``) go at once. Run in the SDK's ``ActivityEnvironment``, which records each
``activity.heartbeat`` call as the worker would send it."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_worker.activities.errors import activity_boundary
from agent_worker.activities.heartbeat import PROCESS, heartbeating
from temporalio import activity
from temporalio.testing import ActivityEnvironment


def recording_environment() -> tuple[ActivityEnvironment, list[Any]]:
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details[0] if details else None)
    return env, beats


async def test_work_done_within_the_interval_sends_no_heartbeat() -> None:
    env, beats = recording_environment()

    async def quick() -> str:
        async with heartbeating(every=0.2):
            await asyncio.sleep(0.05)
        return "done"

    assert await env.run(quick) == "done"
    assert beats == []


async def test_longer_work_beats_every_interval_from_the_first_one_on() -> None:
    env, beats = recording_environment()

    async def slow() -> None:
        async with heartbeating(every=0.1):
            await asyncio.sleep(0.35)

    await env.run(slow)
    # Beats at about 0.1, 0.2 and 0.3 s; none at the start.
    assert 2 <= len(beats) <= 4, beats
    assert all(beat["process"] == PROCESS for beat in beats)


async def test_first_at_once_beats_at_the_start_even_for_instant_work() -> None:
    env, beats = recording_environment()

    async def instant() -> None:
        async with heartbeating(every=5.0, first_at_once=True):
            await asyncio.sleep(0)

    await env.run(instant)
    assert len(beats) == 1


class _Noted:
    """An activity class whose heartbeats carry what a retry must find (as sandbox activities do)."""

    def __init__(self, note: dict[str, Any] | None) -> None:
        if note is not None:
            self.heartbeat_note = note

    @activity.defn(name="test.noted")
    @activity_boundary
    async def run(self) -> str:
        await asyncio.sleep(0.01)
        return "ran"


async def test_the_activity_boundary_beats_at_once_only_for_an_activity_with_a_note() -> None:
    env, beats = recording_environment()
    assert await env.run(_Noted(None).run) == "ran"
    assert beats == []  # an approval's write and answer: no heartbeat RPC

    env, beats = recording_environment()
    assert await env.run(_Noted({"home_queue": "q.sandbox@h1"}).run) == "ran"
    [beat] = beats
    assert beat["home_queue"] == "q.sandbox@h1" and beat["process"] == PROCESS
