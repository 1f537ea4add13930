"""The task page's live stream: the agent's text as it is written, its tool calls and steps, the
task's lifecycle events (commands as they finish, approvals, phases) and its end.

``GET /tasks/<id>/stream`` answers the task's stream as Server-Sent Events, the same frames as the
HTTP API's ``GET /v1/tasks/{id}/stream`` (``api.streams.follow_task``: the workers' stream backend,
resumable with ``Last-Event-ID``, ending once the task has closed). It is authorized as the task
page is: a principal who may not see the task gets the same 404, and no stream.

**Why one script, not a streamed frame.** The page could stay script-free with an iframe whose
document the server keeps writing, but that document can only grow: it cannot take back text a
retried turn has superseded (readers must never see two answers as one), cannot redraw the page
around it once the task closes (the outcome, the evidence, the forms), keeps the browser "loading"
for the task's whole life, needs framing allowed, and a refreshing page would restart it. One
same-origin script (``live.js``, served at ``/live.js``) reading the stream with ``EventSource``
does all of that in under a hundred lines, writing entries with ``textContent`` only. The task page
alone allows it, under a Content-Security-Policy that names ``script-src 'self'`` and
``connect-src 'self'`` and nothing else (no inline script, no ``eval``); every other page keeps
the policy that allows no script at all. Without JavaScript the page refreshes itself as before.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import TYPE_CHECKING

from agent_worker.api.streams import follow_task
from starlette.responses import Response, StreamingResponse

if TYPE_CHECKING:
    from agent_worker.activities.stores.streams import StreamBackend
    from temporalio.client import WorkflowHandle

SCRIPT_PATH = "/live.js"
TASK_PAGE_CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@functools.cache
def _script() -> bytes:
    return resources.files("agent_worker.inbox").joinpath("live.js").read_bytes()


def script_response() -> Response:
    """``live.js`` (public: it holds nothing but code)."""
    return Response(_script(), media_type="text/javascript; charset=utf-8")


async def stream_response(backend: StreamBackend, handle: WorkflowHandle, after: int) -> StreamingResponse:
    """The task's live stream after offset ``after``, as Server-Sent Events (the caller has checked
    that the principal may see the task)."""
    frames = await follow_task(backend, handle, after)
    return StreamingResponse(frames, media_type="text/event-stream", headers={"X-Accel-Buffering": "no"})


__all__ = ["SCRIPT_PATH", "TASK_PAGE_CSP", "script_response", "stream_response"]
