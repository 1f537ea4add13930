/**
 * Following a task's events (`GET /v1/tasks/{id}/events`, Server-Sent Events) over `fetch`, so a
 * bearer token can be sent (a browser's `EventSource` cannot) and a cut connection resumes with
 * `Last-Event-ID`: no event lost, none repeated. Frames are parsed by `eventsource-parser`.
 */

import { EventSourceParserStream } from "eventsource-parser/stream";
import type { EventSourceMessage } from "eventsource-parser/stream";

import { AgentWorkerApiError } from "./errors.js";
import type { Event, FollowItem, TaskPhase } from "./types.js";

/** HTTP answers worth another try: too many open streams, a proxy or an API restarting. */
const RETRY_STATUSES = new Set([429, 502, 503, 504]);
const DEFAULT_RETRY_MS = 1000;
const DEFAULT_MAX_RECONNECTS = 5;

export interface FollowOptions {
  /** Resume after this event id (the `id` of the last item handled): sent as `Last-Event-ID`. */
  after?: number;
  /** Stops following (the iteration then throws the signal's reason). */
  signal?: AbortSignal;
  /** Reconnect after a cut connection, resuming after the last event seen. Default true. */
  reconnect?: boolean;
  /** Reconnects in a row that bring no frame before giving up. Default 5. */
  maxReconnects?: number;
  /** Wait before a reconnect, in milliseconds (a `retry:` from the server wins). Default 1000. */
  retryMs?: number;
}

/** Opens the stream: resolves with a 2xx response, else rejects with `AgentWorkerApiError`. */
export type Open = (after: number | undefined, signal: AbortSignal) => Promise<Response>;

function item(message: EventSourceMessage): FollowItem | undefined {
  const data: unknown = JSON.parse(message.data);
  switch (message.event) {
    case "end": {
      const end = data as { phase: TaskPhase; reason?: string | null };
      return { kind: "end", phase: end.phase, reason: end.reason ?? null };
    }
    case "gap": {
      const gap = data as { missed_from: number; missed_to: number };
      return { kind: "gap", missedFrom: gap.missed_from, missedTo: gap.missed_to };
    }
    case "error": {
      const detail = (data as { detail?: unknown }).detail;
      throw new AgentWorkerApiError(`the event stream failed: ${String(detail)}`, 0, detail);
    }
    default:
      // Every other frame is an event: its `event:` is the event's type, its `id:` its sequence.
      if (message.id === undefined) return undefined;
      return { kind: "event", id: Number(message.id), event: data as Event };
  }
}

function retryable(err: unknown): boolean {
  if (err instanceof AgentWorkerApiError) return RETRY_STATUSES.has(err.status);
  return err instanceof TypeError; // fetch's network failures (refused, reset, cut mid-body)
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", stop);
      resolve();
    }, ms);
    const stop = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener("abort", stop, { once: true });
  });
}

/**
 * The stream's items until its `end`; after a cut (the connection closed or failed before `end`),
 * it reopens after the last event seen, as `EventSource` would.
 */
export async function* follow(open: Open, options: FollowOptions = {}): AsyncGenerator<FollowItem> {
  const reconnect = options.reconnect ?? true;
  const maxReconnects = options.maxReconnects ?? DEFAULT_MAX_RECONNECTS;
  let retryMs = options.retryMs ?? DEFAULT_RETRY_MS;
  let after = options.after;
  let failures = 0;
  const controller = new AbortController();
  const outer = options.signal;
  const abort = () => controller.abort(outer?.reason);
  if (outer?.aborted) abort();
  outer?.addEventListener("abort", abort, { once: true });
  try {
    for (;;) {
      let cause: unknown = undefined;
      try {
        const response = await open(after, controller.signal);
        if (response.body === null) throw new TypeError("the event stream has no body");
        const frames = response.body
          .pipeThrough(new TextDecoderStream())
          .pipeThrough(new EventSourceParserStream({ onRetry: (ms) => (retryMs = ms) }))
          .getReader();
        try {
          for (;;) {
            const { done, value } = await frames.read();
            if (done) break;
            const next = item(value);
            if (next === undefined) continue;
            failures = 0;
            if (next.kind === "event") after = next.id;
            yield next;
            if (next.kind === "end") return;
          }
        } finally {
          frames.cancel().catch(() => undefined);
        }
      } catch (err) {
        if (controller.signal.aborted || !retryable(err)) throw err;
        cause = err;
      }
      failures += 1;
      if (!reconnect || failures > maxReconnects) {
        const last = after === undefined ? "before any event" : `after event ${after}`;
        throw new AgentWorkerApiError(`the event stream was cut ${last}`, 0, String(cause ?? "closed"));
      }
      await sleep(retryMs, controller.signal);
    }
  } finally {
    outer?.removeEventListener("abort", abort);
    controller.abort();
  }
}
