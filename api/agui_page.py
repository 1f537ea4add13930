"""``GET /agui``: a minimal page that follows a task over the AG-UI endpoint, with no library.

Open ``/agui?task=<task id>#token=<bearer token>`` (the fragment never leaves the browser). The page
posts AG-UI runs to ``/v1/agui`` with ``fetch``, reads their Server-Sent Events, shows the model's
messages as their tokens arrive, the tool calls with their arguments, and the task's phase; an
interrupt (an approval the caller may decide) shows Approve and Reject buttons that answer it with
the next run's ``resume``. A run cut before its end is run again after the last cursor seen.

What it saw is also in ``window.agui`` (events, cursor, runs, cuts, problems), for tests.
"""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agent-worker · AG-UI</title>
<style>
body { font: 15px system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; color: #222; }
.message { white-space: pre-wrap; background: #f4f6f8; padding: .6rem .8rem; border-radius: 6px;
  margin: .4rem 0; }
.tool { font-family: ui-monospace, monospace; font-size: 13px; color: #444; margin: .3rem 0; }
.interrupt { border: 1px solid #c90; background: #fff8e6; padding: .6rem .8rem; border-radius: 6px; }
#phase { font-weight: 600; }
</style></head>
<body>
<h1>Task <code id="task"></code></h1>
<p>Phase: <span id="phase">…</span> <span id="status"></span></p>
<div id="log"></div>
<div id="interrupts"></div>
<p id="result"></p>
<script>
const params = new URLSearchParams(location.search);
const hash = new URLSearchParams(location.hash.slice(1));
const task = params.get("task") || "";
const token = hash.get("token") || params.get("token") || "";
const agui = window.agui = { events: [], cursor: null, problems: [], runs: 0, cuts: [], finished: null };
document.getElementById("task").textContent = task;

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function onEvent(event) {
  agui.events.push(event.type);
  if (event.metadata && event.metadata.cursor !== undefined) agui.cursor = event.metadata.cursor;
  const log = document.getElementById("log");
  switch (event.type) {
    case "TEXT_MESSAGE_START":
      if (!document.getElementById("m-" + event.messageId)) {
        const node = el("div", "message"); node.id = "m-" + event.messageId; log.appendChild(node);
      }
      break;
    case "TEXT_MESSAGE_CONTENT":
      document.getElementById("m-" + event.messageId).textContent += event.delta;
      break;
    case "TOOL_CALL_START": {
      const node = el("div", "tool", "→ " + event.toolCallName + " ");
      node.id = "t-" + event.toolCallId; log.appendChild(node);
      break;
    }
    case "TOOL_CALL_ARGS":
      document.getElementById("t-" + event.toolCallId).textContent += event.delta;
      break;
    case "TOOL_CALL_RESULT":
      log.appendChild(el("div", "tool", "← " + event.content));
      break;
    case "CUSTOM":
      if (event.name === "superseded") {
        for (const id of event.value.messageIds) {
          const node = document.getElementById("m-" + id); if (node) node.remove();
        }
      }
      break;
    case "STATE_SNAPSHOT":
      document.getElementById("phase").textContent = event.snapshot.phase;
      break;
    case "RUN_FINISHED":
      if (event.outcome && event.outcome.type === "interrupt") {
        showInterrupts(event.outcome.interrupts);
      } else {
        agui.finished = event.result || {};
        document.getElementById("result").textContent = "Finished: " + (agui.finished.phase || "");
      }
      break;
    case "RUN_ERROR":
      agui.finished = { error: event.message };
      document.getElementById("result").textContent = "Error: " + event.message;
      break;
  }
}

function showInterrupts(interrupts) {
  const box = document.getElementById("interrupts");
  box.textContent = "";
  interrupts.forEach((interrupt, n) => {
    const card = el("div", "interrupt");
    card.appendChild(el("p", "", interrupt.message || interrupt.reason));
    card.appendChild(el("pre", "tool", JSON.stringify((interrupt.metadata || {}).arguments || {}, null, 1)));
    for (const decision of ["approve", "reject"]) {
      const button = el("button", "", decision === "approve" ? "Approve" : "Reject");
      button.id = decision + "-" + n;
      button.onclick = () => {
        box.textContent = "";
        run([{ interruptId: interrupt.id, status: "resolved", payload: { decision } }]);
      };
      card.appendChild(button);
    }
    box.appendChild(card);
  });
}

async function run(resume) {
  agui.runs += 1;
  const input = {
    threadId: task, runId: crypto.randomUUID(), messages: [], state: {}, tools: [], context: [],
    forwardedProps: agui.cursor === null ? {} : { cursor: agui.cursor },
  };
  if (resume) input.resume = resume;
  let ended = false, broke = null;
  try {
    const reply = await fetch("/v1/agui", {
      method: "POST",
      headers: { "Authorization": "Bearer " + token, "Content-Type": "application/json",
                 "Accept": "text/event-stream" },
      body: JSON.stringify(input),
    });
    if (!reply.ok) { agui.problems.push("HTTP " + reply.status + " " + await reply.text()); return; }
    const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      const frames = buffer.split("\n\n");
      buffer = frames.pop();
      for (const frame of frames) {
        const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim());
        if (!data.length) continue;
        const event = JSON.parse(data.join("\n"));
        onEvent(event);
        if (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR") ended = true;
      }
    }
  } catch (err) {
    broke = String(err);
  }
  if (!ended) {  // the connection was cut before the run's end: go on after the last cursor
    agui.cuts.push(broke || "ended early");
    document.getElementById("status").textContent = "(reconnecting)";
    setTimeout(() => run(), 1000);
  } else {
    document.getElementById("status").textContent = "";
  }
}

if (task && token) run();
else document.getElementById("status").textContent = "open /agui?task=ID#token=TOKEN";
</script>
</body></html>
"""

__all__ = ["PAGE"]
