"""The inbox's task page shows the task's live stream (issue 20, acceptance 1): in headless Chromium,
the model's first words are on the page while the turn's activity is still running (the local model
server streams slowly on purpose), then the turn's steps, then the completion; the stream is
authorized as the task page is, and only the task page may run a script (its own, same-origin)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

from agent_worker.inbox import build_app, running_inbox
from agent_worker.inbox.auth import COOKIE
from agent_worker.inbox.pages import task_url
from agent_worker.schemas.streams import StreamEntry, assemble_text
from agent_worker.schemas.tasks import TaskPhase, TaskResult

from tests.helpers.browser import chromium, fetch, save_screenshot
from tests.helpers.openai_stub import OpenAIStub
from tests.helpers.support import TaskEnv
from tests.test_inbox_web import (
    LEAD_TOKEN,
    STRANGER_TOKEN,
    http_sign_in,
    session_cookie,
    sign_in,
    tokens_file,
)
from tests.test_live_stream import ANSWER, SPEC, backend_of, openai_env, stub, turn_completed

__all__ = ["openai_env", "stub", "tokens_file"]  # fixtures shared with the modules they come from


# One round trip to the browser per snapshot (a snapshot of element-by-element reads took a round
# trip per line, a second or more on a loaded machine, and missed the text growing in between).
PAGE_NOW = """
const lines = (selector) => Array.from(document.querySelectorAll(selector), (e) => e.innerText);
const texts = Array.from(document.querySelectorAll("#live-log pre.text"))
  .filter((e) => e.offsetParent !== null)
  .map((e) => e.innerText);
const phase = document.getElementById("phase");
return {
  text: texts.length ? texts[texts.length - 1] : "",
  steps: lines("#live-log p.step"),
  events: lines("#live-log p.event"),
  phase: phase ? phase.innerText : null,
  evidence: document.getElementById("evidence") !== null,
};
"""


def page_now(driver: Any) -> dict[str, Any]:
    """What the task page shows at this moment: the live text, step and event lines, the phase."""
    from selenium.common.exceptions import NoSuchElementException

    seen = driver.execute_script(PAGE_NOW)
    if seen["phase"] is None:  # between a reload's request and its page
        raise NoSuchElementException("the page has no phase yet")
    return {"at": time.monotonic(), **seen}


def watch(driver: Any, until: Any, within: float) -> list[dict[str, Any]]:
    """Snapshots of the page every 0.1 s until ``until(snapshot)`` (a reload in between is skipped)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + within
    while not seen or not until(seen[-1]):
        assert time.monotonic() < deadline, f"the page never got there: {seen[-1:]}"
        try:
            seen.append(page_now(driver))
        except (NoSuchElementException, StaleElementReferenceException):
            pass
        time.sleep(0.1)
    return seen


def closed_and_replayed(seen: dict[str, Any]) -> bool:
    return seen["evidence"] and any(e.startswith("task.finished") for e in seen["events"])


async def test_the_task_page_shows_the_first_tokens_while_the_turn_runs_then_its_steps_then_the_completion(
    openai_env: TaskEnv, stub: OpenAIStub, tokens_file: Path, tmp_path: Path
) -> None:
    """The model streams 40 words over ~6 s. In Chromium, the task page shows the first words while
    the turn's activity has not completed (its history says so) and the page's phase still reads
    running; the words grow into the whole answer, then the turn's finished step appears, then the
    page redraws itself for the completed task, with its output and evidence."""
    stub.reply_text(ANSWER, chunk_delay=0.15)
    app = build_app(openai_env.client, auth="token", tokens=tokens_file, streams=backend_of(openai_env))
    driver = await asyncio.to_thread(chromium)
    try:
        async with running_inbox(app, "127.0.0.1:0") as url:
            await asyncio.to_thread(sign_in, driver, url, LEAD_TOKEN)
            # Started once the browser is up: its start-up (seconds on a loaded machine) must not eat
            # into the turn's ~6 s, which the page has to catch while it runs.
            handle = await openai_env.start(SPEC)
            await asyncio.to_thread(driver.get, url + task_url(handle.id))
            [*_, first] = await asyncio.to_thread(watch, driver, lambda s: s["text"], 30)
            turn_done_at_first_words = await turn_completed(handle)
            # Done: the page redrawn for the closed task, its stream replayed to the task's end.
            later = await asyncio.to_thread(watch, driver, closed_and_replayed, 60)
            shot = await asyncio.to_thread(save_screenshot, driver, tmp_path, "inbox-live-completed.png")
            final_output = await asyncio.to_thread(lambda: driver.find_element("id", "final-output").text)
    finally:
        await asyncio.to_thread(driver.quit)

    assert not turn_done_at_first_words, "the first words reached the page only after the turn completed"
    assert first["phase"] == "running", first
    assert ANSWER.startswith(first["text"]) and len(first["text"]) < len(ANSWER), first
    assert any("turn.started" in s for s in first["steps"]) and not any(
        "turn.finished" in s for s in first["steps"]
    )

    finished = next(s for s in later if any("turn.finished" in step for step in s["steps"]))
    growing = [first["text"]] + [s["text"] for s in later if s["at"] < finished["at"]]
    assert len(set(growing)) > 2, "the text did not grow on the page as it was written"
    assert finished["text"] == ANSWER and not finished["evidence"], finished
    done = later[-1]
    assert done["phase"] == "completed" and done["at"] > finished["at"]
    assert final_output == ANSWER and done["text"] == ANSWER
    assert any(e.startswith("task.finished") and "phase=completed" in e for e in done["events"]), done
    assert shot.stat().st_size > 10_000
    result: TaskResult = await asyncio.wait_for(handle.result(), 30)
    assert result.phase is TaskPhase.COMPLETED and result.final_output == ANSWER


def sse_entries(body: str) -> list[StreamEntry]:
    """The stream entries of a whole Server-Sent Events body (the ``end`` frame left out)."""
    frames = [dict(re.findall(r"^(event|id|data): (.*)$", block, re.M)) for block in body.split("\n\n")]
    return [StreamEntry.model_validate(json.loads(f["data"])) for f in frames if f and f["event"] != "end"]


async def test_the_live_stream_is_authorized_as_the_task_page_and_only_the_task_page_runs_a_script(
    openai_env: TaskEnv, stub: OpenAIStub, tokens_file: Path
) -> None:
    """A signed-in principal the task's policy does not name (mallory) gets 404 and no stream, a
    browser without a session is sent to the login; the approver's stream of the finished task is
    its whole stream (the text is the output) and ends. The task page's policy allows one script,
    same-origin (no inline script, no eval), and the inbox page still allows none."""
    stub.reply_text(ANSWER, chunk_delay=0.01)
    handle = await openai_env.start(SPEC)
    result: TaskResult = await asyncio.wait_for(handle.result(), 60)
    app = build_app(openai_env.client, auth="token", tokens=tokens_file, streams=backend_of(openai_env))
    stream = task_url(handle.id) + "/stream"
    async with running_inbox(app, "127.0.0.1:0") as url:
        mallory = {
            "Cookie": session_cookie((await asyncio.to_thread(http_sign_in, url, STRANGER_TOKEN)).headers)
        }
        refused = await asyncio.to_thread(fetch, url + stream, headers=mallory)
        assert refused.status == 404 and "event:" not in refused.body and ANSWER[:20] not in refused.body
        anonymous = await asyncio.to_thread(fetch, url + stream)
        assert (anonymous.status, anonymous.headers.get("location")) == (303, "/login")

        lead = {"Cookie": session_cookie((await asyncio.to_thread(http_sign_in, url, LEAD_TOKEN)).headers)}
        followed = await asyncio.to_thread(fetch, url + stream, headers=lead)
        assert followed.status == 200 and followed.headers["content-type"].startswith("text/event-stream")
        assert followed.body.rstrip().split("\n\n")[-1].startswith("event: end")
        entries = sse_entries(followed.body)
        assert [e.offset for e in entries] == list(range(1, len(entries) + 1))
        assert assemble_text(entries) == result.final_output == ANSWER

        page = await asyncio.to_thread(fetch, url + task_url(handle.id), headers=lead)
        policy = page.headers["content-security-policy"]
        script_src = re.search(r"script-src ([^;]*)", policy)
        assert script_src and script_src.group(1).strip() == "'self'", policy
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page.body, re.S)
        assert scripts == [(' src="/live.js" defer', "")], scripts  # one, by URL: nothing inline
        code = await asyncio.to_thread(fetch, url + "/live.js")
        assert code.status == 200 and "EventSource" in code.body and "eval(" not in code.body
        assert "innerHTML" not in code.body  # entries are written as text, never parsed as HTML
        inbox_page = await asyncio.to_thread(fetch, url + "/", headers=lead)
        assert "script-src" not in inbox_page.headers["content-security-policy"]
        assert "<script" not in inbox_page.body and COOKIE not in inbox_page.body
