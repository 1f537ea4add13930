// follow() and wait() against a scripted SSE server on loopback (node:http): reconnects after a cut with
// Last-Event-ID, stops at `end`, gives up after maxReconnects, throws on `error` frames and on HTTP
// errors without retrying them, and closes its connection when the loop is left. Run by
// tests/test_typescript_client.py (`node --test`), against the built dist/.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";

import { AgentWorkerApi, AgentWorkerApiError } from "../dist/index.js";

const TASK = "acme/report-1";

function frame(kind, data, id) {
  return `event: ${kind}\n${id === undefined ? "" : `id: ${id}\n`}data: ${JSON.stringify(data)}\n\n`;
}

function event(seq, type) {
  return frame(type, { seq, type, task_id: TASK, event_id: `e${seq}`, at: "2026-12-05T00:00:00Z", phase: "running" }, seq);
}

// A server answering the n-th request with handlers[n] (the last one repeats); the requests it saw.
async function serve(handlers) {
  const seen = [];
  const server = createServer((req, res) => {
    seen.push({ url: req.url, lastEventId: req.headers["last-event-id"], auth: req.headers.authorization });
    const handler = handlers[Math.min(seen.length - 1, handlers.length - 1)];
    handler(req, res);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const api = new AgentWorkerApi({ baseUrl: `http://127.0.0.1:${server.address().port}/`, token: "t".repeat(16) });
  return { api, seen, close: () => new Promise((resolve) => { server.close(resolve); server.closeAllConnections(); }) };
}

function sse(res) {
  res.writeHead(200, { "Content-Type": "text/event-stream" });
}

async function collect(iterable) {
  const items = [];
  for await (const item of iterable) items.push(item);
  return items;
}

test("a stream closed early and a stream reset are both resumed after the last event, with nothing repeated", async () => {
  const server = await serve([
    (req, res) => { sse(res); res.end(event(1, "task.started")); },  // closed without `end`
    (req, res) => { sse(res); res.write(event(2, "turn.started"), () => res.destroy()); },  // reset
    (req, res) => {
      sse(res);
      res.write(": keepalive\n\n");
      res.end(event(3, "task.finished") + frame("end", { phase: "completed", reason: null }));
    },
  ]);
  try {
    const items = await collect(server.api.follow(TASK, { retryMs: 10 }));
    assert.deepEqual(items.map((i) => i.kind === "event" ? i.id : i.kind), [1, 2, 3, "end"]);
    assert.equal(items[3].phase, "completed");
    assert.deepEqual(server.seen.map((s) => s.lastEventId), [undefined, "1", "2"]);
    assert.equal(server.seen[0].url, "/v1/tasks/acme/report-1/events");
    assert.equal(server.seen[0].auth, `Bearer ${"t".repeat(16)}`);
  } finally {
    await server.close();
  }
});

test("after: resumes after that event from the first request; a gap is reported, not skipped", async () => {
  const server = await serve([
    (req, res) => {
      sse(res);
      res.end(frame("gap", { missed_from: 5, missed_to: 6 }) + event(7, "task.finished") + frame("end", { phase: "failed", reason: "why" }));
    },
  ]);
  try {
    const items = await collect(server.api.follow(TASK, { after: 4 }));
    assert.deepEqual(items[0], { kind: "gap", missedFrom: 5, missedTo: 6 });
    assert.equal(items[1].event.type, "task.finished");
    assert.deepEqual(items[2], { kind: "end", phase: "failed", reason: "why" });
    assert.deepEqual(server.seen.map((s) => s.lastEventId), ["4"]);
  } finally {
    await server.close();
  }
});

test("a stream that keeps closing with nothing new gives up after maxReconnects", async () => {
  const server = await serve([(req, res) => { sse(res); res.end(); }]);
  try {
    await assert.rejects(collect(server.api.follow(TASK, { retryMs: 5, maxReconnects: 2 })), (err) =>
      err instanceof AgentWorkerApiError && err.status === 0 && /cut before any event/.test(err.message));
    assert.equal(server.seen.length, 3);
  } finally {
    await server.close();
  }
});

test("an error frame throws, and an HTTP 404 throws with its detail and is not retried", async () => {
  const server = await serve([
    (req, res) => { sse(res); res.end(frame("error", { detail: "no worker answered" })); },
    (req, res) => {
      res.writeHead(404, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ detail: "no task 'acme/report-1'" }));
    },
  ]);
  try {
    await assert.rejects(collect(server.api.follow(TASK)), (err) =>
      err instanceof AgentWorkerApiError && err.status === 0 && err.detail === "no worker answered");
    await assert.rejects(collect(server.api.follow(TASK, { retryMs: 5 })), (err) =>
      err instanceof AgentWorkerApiError && err.status === 404 && err.detail === "no task 'acme/report-1'");
    assert.equal(server.seen.length, 2);
  } finally {
    await server.close();
  }
});

test("leaving the loop closes the connection", async () => {
  let closed;
  const gone = new Promise((resolve) => { closed = resolve; });
  const server = await serve([
    (req, res) => { sse(res); res.write(event(1, "task.started")); res.on("close", closed); },
  ]);
  try {
    for await (const item of server.api.follow(TASK)) {
      assert.equal(item.id, 1);
      break;
    }
    await gone;  // the server saw the connection close (the test would hang, then time out, if not)
  } finally {
    await server.close();
  }
});

test("wait() follows to the end, then reads the task", async () => {
  const server = await serve([
    (req, res) => { sse(res); res.end(event(1, "task.finished") + frame("end", { phase: "completed", reason: null })); },
    (req, res) => {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ task_id: TASK, running: false, result: { phase: "completed" } }));
    },
  ]);
  try {
    const view = await server.api.wait(TASK);
    assert.equal(view.result.phase, "completed");
    assert.deepEqual(server.seen.map((s) => s.url), ["/v1/tasks/acme/report-1/events", "/v1/tasks/acme/report-1"]);
  } finally {
    await server.close();
  }
});
