"""A turn's live stream: the model's tokens, tool-call starts, read-tool results and step boundaries,
written to the stream backend as they happen (``schemas.streams``), never through history.

``TurnStream`` is the turn's writer: ``emit`` only buffers (it never waits for the store); a
background task appends what has gathered every ``FLUSH_SECONDS``, in a thread. The stream is best
effort: a store that is down or slow never fails or holds up the turn; what could not be written is
logged once per turn and counted (``agent_worker_stream_dropped``), and the event sink stays the
audit record.

``StreamingModel`` wraps a real model of the turn's chain: its ``get_response`` reads the model's
``stream_response``, forwards text deltas and tool-call starts, and returns the ``ModelResponse``
of the final ``response.completed`` event, so the run is driven (and journaled, and falls back) as
before. A stream that breaks off (the connection drops, or it ends before the response completed)
is an ``APIConnectionError``: an outage, as a refused connection would be. A model that fails after
it wrote tokens leaves a ``superseded`` entry for its call before the next model of the chain
answers.

Not every OpenAI-compatible server streams. One that ignores ``stream`` (a plain JSON body, not one
stream chunk) or refuses it (HTTP 400 or 422 that mentions ``stream``, or a 400 that the same
request without streaming does not get) is asked once more without streaming; when that answers,
the model is not streamed again in this worker process (``_UNSTREAMED``, one warning per model) and
its answers reach the stream whole. A 400 that the unstreamed request gets as well is a bad request:
it is raised as the server answered it (``provider_errors``), after exactly two requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import structlog
from agent_worker.activities.agent.providers import ModelChoice
from agent_worker.activities.stores.streams import WRITER, StreamBackend
from agent_worker.schemas.streams import StreamEntry, StreamKind
from agent_worker.security.redact import redact_value
from agent_worker.telemetry import metrics
from agents.exceptions import ModelBehaviorError
from agents.items import ModelResponse, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage
from temporalio import activity

log = structlog.get_logger(__name__)

FLUSH_SECONDS = 0.05
# Entries waiting for a slow store past this many are dropped (counted), not kept without bound.
MAX_PENDING = 20_000
# How long the end of a turn waits for its last entries to be written.
CLOSE_SECONDS = 2.0
PREVIEW_CHARS = 2_000
# A tool call's arguments (JSON text) ride on its ``tool_call`` entry up to this size; longer ones
# are left out (``arguments_chars`` says how long they were), so a stream entry stays small.
ARGUMENTS_CHARS = 8_000
# A secret can arrive split across token deltas: the trailing run of non-space characters (up to
# this many) waits for the next delta, so that redaction sees it whole.
HELD_TOKEN_CHARS = 256
_STREAMED = frozenset({"responses", "chat_completions"})
# Models (by chain label) whose server ignored or refused a streamed request, then answered the
# same request unstreamed: called without streaming for the rest of this process.
_UNSTREAMED: set[str] = set()
# Statuses a server answers a `stream` it does not support with (FastAPI-based ones: 422).
_REFUSED_STREAM_STATUSES = frozenset({400, 422})
_ANSWER_CHARS = 300


class TurnStream:
    """The live stream of one attempt of one turn (see the module docstring)."""

    def __init__(
        self,
        backend: StreamBackend | None,
        task_id: str,
        run_chain: str | None,
        turn: int,
        attempt: int = 1,
    ) -> None:
        self.backend = backend
        self.task_id = task_id
        self.run_chain = run_chain
        self.turn = turn
        self.attempt = attempt
        self.call = 0
        self.call_streamed = False
        self.dropped = 0
        self._pending: list[StreamEntry] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None
        self._warned = False
        self._held, self._held_call = "", 0

    @classmethod
    def for_attempt(
        cls, backend: StreamBackend | None, task_id: str, run_chain: str | None, turn: int
    ) -> TurnStream:
        """The stream of the running ``agent.turn`` attempt: a retried attempt first marks the
        earlier attempts' entries of its turn superseded, then says the turn started."""
        attempt = activity.info().attempt if activity.in_activity() else 1
        stream = cls(backend, task_id, run_chain, turn, attempt)
        if attempt > 1:
            stream.emit("superseded", {"reason": "retry", "attempts_before": attempt})
        stream.step("turn.started")
        return stream

    @property
    def enabled(self) -> bool:
        return self.backend is not None

    def emit(self, kind: StreamKind, data: dict[str, Any], call: int | None = None) -> None:
        """Queue an entry (never waits), its data redacted: readers of the stream are outside. A
        token's trailing partial word waits for the next token (``HELD_TOKEN_CHARS``)."""
        if self.backend is None:
            return
        call = self.call if call is None else call
        if kind == "token":
            if self._held_call != call:
                self._release()
            text = self._held + data["text"]
            cut = next((i + 1 for i in range(len(text) - 1, -1, -1) if text[i].isspace()), 0)
            cut = len(text) if len(text) - cut > HELD_TOKEN_CHARS else cut
            self._held, self._held_call = text[cut:], call
            if not cut:
                return
            data = {**data, "text": text[:cut]}
        else:
            self._release()
        self._append(kind, data, call)

    def _release(self) -> None:
        """Queue the token text held back, if any."""
        if self._held:
            held, self._held = self._held, ""
            self._append("token", {"text": held}, self._held_call)

    def _append(self, kind: StreamKind, data: dict[str, Any], call: int) -> None:
        if len(self._pending) >= MAX_PENDING:
            self._drop(1, "too many entries waiting for the stream store")
            return
        self._pending.append(
            StreamEntry(
                task_id=self.task_id,
                run_chain=self.run_chain,
                turn=self.turn,
                attempt=self.attempt,
                call=call,
                kind=kind,
                data=redact_value(data),
                at=time.time(),
                writer=WRITER,
            )
        )
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    def step(self, step: str, **data: Any) -> None:
        self.emit("step", {"step": step, **data})

    def begin_call(self, index: int) -> None:
        """A model call starts (its entries carry ``index``)."""
        self._release()
        self.call = index
        self.call_streamed = False

    def end_call(self, response: ModelResponse) -> None:
        """A model call answered: when nothing streamed it (a scripted model, a journaled answer, a
        model that does not stream), its text is one ``token`` entry and its tool calls follow."""
        self._release()
        if self.call_streamed:
            return
        text = response_text(response)
        if text:
            self.emit("token", {"text": text})
        for item in response.output:
            if getattr(item, "type", None) == "function_call":
                self.emit("tool_call", tool_call_data(item))

    def tool_result(self, name: str, call_id: str | None, output: object) -> None:
        """A read tool finished inside the turn (its output cut to a preview)."""
        text = output if isinstance(output, str) else str(output)
        self.emit(
            "tool_result",
            {"name": name, "call_id": call_id, "output": text[:PREVIEW_CHARS], "chars": len(text)},
        )

    async def close(self) -> None:
        """Write what is left (waiting at most ``CLOSE_SECONDS``); never raises."""
        self._release()
        self._closing = True
        self._wake.set()
        if self._flusher is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._flusher), CLOSE_SECONDS)
        except (TimeoutError, asyncio.CancelledError):
            self._drop(len(self._pending), "the stream store did not answer before the turn ended")
            self._pending.clear()
        except Exception:  # the flusher logs its own failures
            pass

    async def _flush_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_SECONDS)
            self._wake.clear()
            batch, self._pending = self._pending, []
            if batch:
                assert self.backend is not None
                try:
                    await asyncio.to_thread(self.backend.append, self.task_id, self.run_chain, batch)
                except Exception as err:  # best effort: the turn goes on without its stream
                    self._drop(len(batch), f"{type(err).__name__}: {err}")
            if self._closing and not self._pending:
                return

    def _drop(self, count: int, why: str) -> None:
        self.dropped += count
        metrics.activity_counter("agent_worker_stream_dropped", count)
        if not self._warned:
            self._warned = True
            log.warning(
                "live stream entries dropped (the turn goes on)",
                task_id=self.task_id,
                turn=self.turn,
                reason=why[:300],
            )


def response_text(response: ModelResponse) -> str:
    """The text of a response's assistant messages."""
    parts = []
    for item in response.output:
        if getattr(item, "type", None) == "message":
            for content in getattr(item, "content", []):
                if getattr(content, "type", None) == "output_text":
                    parts.append(content.text)
    return "".join(parts)


@dataclasses.dataclass
class StreamingModel(Model):
    """A real model answered through its stream (see the module docstring)."""

    inner: Model
    stream: TurnStream
    label: str = ""

    @classmethod
    def wrap(cls, chain: list[ModelChoice], stream: TurnStream) -> list[ModelChoice]:
        """The chain with its OpenAI models (Responses, Chat Completions) answering through their
        streams; the others (scripted, LiteLLM, an agent's own ``Model``) as they are, their
        answers written whole (``TurnStream.end_call``)."""
        if not stream.enabled:
            return chain
        return [
            dataclasses.replace(c, model=cls(c.model, stream, c.label))
            if c.api in _STREAMED and c.label not in _UNSTREAMED
            else c
            for c in chain
        ]

    async def get_response(
        self, system_instructions: Any, input: Any, model_settings: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        if self.label in _UNSTREAMED:
            # Another turn of this worker found that the server does not stream.
            return await self.inner.get_response(system_instructions, input, model_settings, *args, **kwargs)
        if getattr(model_settings, "include_usage", None) is None:
            # Chat Completions streams report usage only when asked.
            model_settings = dataclasses.replace(model_settings, include_usage=True)
        stream = self.stream
        stream.step("call.started", model=self.label)
        final = None
        seen = 0
        refused: openai.APIStatusError | None = None
        try:
            events = self.inner.stream_response(system_instructions, input, model_settings, *args, **kwargs)
            # A transport error mid-body reaches here as openai.APIConnectionError already (the
            # client wraps its transport's errors; test_stream_fallback's torn case).
            async with contextlib.aclosing(events) as events:  # type: ignore[type-var]
                async for event in events:
                    seen += 1
                    final = self._forward(event) or final
            if final is None and seen:
                raise _broken_off("it ended before the response completed")
        except openai.APIStatusError as err:
            if seen or not _maybe_refused_stream(err):
                self._supersede(err)
                raise
            refused = err
        except BaseException as err:
            self._supersede(err)
            raise
        if refused is not None or _no_stream(seen, final):
            # The server refused the stream, or ignored `stream` and answered with a plain body
            # (no stream chunk): the same request, unstreamed, tells whether it can answer at all.
            # If that fails too, its error (the server's word on the request itself) is the call's:
            # a bad request stays one, after two requests.
            response = await self.inner.get_response(
                system_instructions, input, model_settings, *args, **kwargs
            )
            why = (
                f"HTTP {refused.status_code}: {_answer(refused)}"
                if refused is not None
                else "a reply with no stream events"
            )
            _stream_no_more(self.label, why)
            return response
        assert final is not None
        return ModelResponse(output=final.output, usage=_usage(final), response_id=final.id)

    def _supersede(self, err: BaseException) -> None:
        """A call that fails after it streamed: its entries so far are void."""
        if self.stream.call_streamed:
            self.stream.emit(
                "superseded", {"call": self.stream.call, "model": self.label, "reason": type(err).__name__}
            )
            self.stream.call_streamed = False

    def _forward(self, event: Any) -> Any:
        """Forward one stream event; the final response when this is the completed event."""
        kind = getattr(event, "type", None)
        if kind == "response.output_text.delta" and event.delta:
            self.stream.call_streamed = True
            self.stream.emit("token", {"text": event.delta})
        elif kind == "response.output_item.done" and getattr(event.item, "type", None) == "function_call":
            # On ``done``, not ``added``: only then are the call's arguments whole.
            self.stream.call_streamed = True
            self.stream.emit("tool_call", tool_call_data(event.item))
        elif kind == "response.completed":
            return event.response
        elif kind in ("response.failed", "response.incomplete", "error", "response.error"):
            raise ModelBehaviorError(f"the model's stream ended with {kind}")
        return None

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        return self.inner.stream_response(*args, **kwargs)

    def get_retry_advice(self, request: Any) -> Any:
        return self.inner.get_retry_advice(request)


def tool_call_data(item: Any) -> dict[str, Any]:
    """A ``tool_call`` entry's data: the call's name, id and (up to ``ARGUMENTS_CHARS``) arguments."""
    data: dict[str, Any] = {"name": item.name, "call_id": item.call_id}
    arguments = getattr(item, "arguments", None) or ""
    if len(arguments) <= ARGUMENTS_CHARS:
        data["arguments"] = arguments
    else:
        data["arguments_chars"] = len(arguments)
    return data


def _stream_no_more(label: str, answer: str) -> None:
    """The server of ``label`` does not stream but answered unstreamed: stop streaming that model in
    this worker process, saying so once (concurrent turns that found it too stay quiet)."""
    if label in _UNSTREAMED:
        return
    _UNSTREAMED.add(label)
    log.warning(
        "model server does not stream; calling it without streaming in this worker from now on",
        model=label,
        answer=answer,
    )


def _no_stream(seen: int, final: Any) -> bool:
    """Whether a stream carried no chunk of the server's: no event at all (the Responses model on a
    plain JSON body), or only the completed event the Chat Completions model makes up, empty, when
    the body held no chunk (a real stream starts with ``response.created``)."""
    return seen == 0 or (seen == 1 and final is not None and not final.output)


def _maybe_refused_stream(err: openai.APIStatusError) -> bool:
    """A streamed request's 400, or a 400 or 422 that mentions ``stream``: perhaps the server does
    not stream (asked again unstreamed to tell). Any other status is the request's own failure."""
    if err.status_code not in _REFUSED_STREAM_STATUSES:
        return False
    return err.status_code == 400 or "stream" in f"{err.message} {err.body}".lower()


def _answer(err: openai.APIStatusError) -> str:
    """The server's words for a refused stream (the error body's message when it has one)."""
    body = err.body
    words = body.get("message") if isinstance(body, dict) else None
    return str(words or body or err.message)[:_ANSWER_CHARS]


def _broken_off(why: str) -> openai.APIConnectionError:
    """A stream that broke off mid-answer is an outage of the provider, like a refused connection:
    retried by Temporal, passed over by a fallback chain (``provider_errors``)."""
    request = httpx.Request("POST", "http://model-stream.invalid/")
    return openai.APIConnectionError(message=f"the model's stream broke off: {why}", request=request)


def _usage(response: Any) -> Usage:
    usage = response.usage
    if usage is None:
        return Usage(requests=1)
    found = Usage(
        requests=1,
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        total_tokens=usage.total_tokens or 0,
    )
    if getattr(usage, "input_tokens_details", None) is not None:
        found.input_tokens_details = usage.input_tokens_details
    if getattr(usage, "output_tokens_details", None) is not None:
        found.output_tokens_details = usage.output_tokens_details
    return found


__all__ = ["StreamingModel", "TurnStream", "response_text", "tool_call_data"]
