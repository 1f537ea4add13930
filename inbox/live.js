// The inbox's one script (GET /live.js; only the task page's Content-Security-Policy allows it, and
// nothing inline). It follows the task's live stream, the Server-Sent Events of
// GET /tasks/<id>/stream, and writes each entry into the page with textContent, never as HTML.
// Why a script and not a streamed frame: inbox/live.py.
"use strict";
(() => {
  const box = document.getElementById("live");
  if (!box) return;
  const log = document.getElementById("live-log");
  const state = document.getElementById("live-state");
  const phase = document.getElementById("phase");
  const retried = new Map(); // turn -> the attempt whose superseded entry voided the earlier ones
  let text = null; // the <pre> the model call being written goes into

  const mark = (el, e) => {
    el.dataset.turn = e.turn;
    el.dataset.attempt = e.attempt;
    el.dataset.call = e.call;
    el.dataset.offset = e.offset;
    // An earlier attempt that wrote on after its turn was retried: void as soon as it arrives.
    if (e.kind !== "superseded" && e.attempt < (retried.get(e.turn) || 0)) el.hidden = true;
  };
  const line = (e, words) => {
    const p = document.createElement("p");
    p.className = `entry ${e.kind}`;
    mark(p, e);
    p.textContent = words;
    log.appendChild(p);
    text = null;
  };
  const brief = (data) =>
    Object.entries(data || {})
      .filter(([, v]) => v !== null && typeof v !== "object")
      .map(([k, v]) => `${k}=${String(v).slice(0, 120)}`)
      .join(" ");

  const show = {
    token(e) {
      const key = `${e.turn}/${e.attempt}/${e.call}`;
      if (text === null || text.dataset.key !== key) {
        text = document.createElement("pre");
        text.className = "text";
        text.dataset.key = key;
        mark(text, e);
        log.appendChild(text);
      }
      text.textContent += e.data.text || "";
    },
    tool_call: (e) => line(e, `turn ${e.turn} calls ${e.data.name || "?"}`),
    tool_result: (e) => line(e, `turn ${e.turn} ${e.data.name || "?"} answered: ${String(e.data.output ?? "")}`),
    step: (e) => line(e, `turn ${e.turn} ${e.data.step || ""} ${brief({ ...e.data, step: null })}`.trim()),
    superseded(e) {
      const call = e.data.call;
      for (const el of log.querySelectorAll(`[data-turn="${e.turn}"]:not(.superseded)`)) {
        const attempt = Number(el.dataset.attempt);
        if (call == null ? attempt < e.attempt : attempt === e.attempt && Number(el.dataset.call) === call) {
          el.hidden = true;
        }
      }
      if (call == null) retried.set(e.turn, Math.max(retried.get(e.turn) || 0, e.attempt));
      line(
        e,
        call == null
          ? `turn ${e.turn}: attempt ${e.attempt} starts over; the earlier attempts' output is void`
          : `turn ${e.turn}: a model call's text is void (${e.data.model || "the model"} failed)`,
      );
    },
    event(e) {
      const ev = e.data;
      line(e, `${ev.type} ${brief(ev.data)}`.trim());
      const now = (ev.data && ev.data.phase) || ev.phase;
      if (phase && now) {
        phase.textContent = now;
        phase.className = `badge phase-${now}`;
      }
    },
  };

  const source = new EventSource(box.dataset.src);
  for (const [kind, render] of Object.entries(show)) {
    source.addEventListener(kind, (m) => render(JSON.parse(m.data)));
  }
  source.addEventListener("gap", (m) => {
    const gap = JSON.parse(m.data);
    line({ kind: "gap", turn: 0, attempt: 1, call: 0, offset: 0 }, `entries ${gap.missed_from} to ${gap.missed_to} are past the stream's retention`);
  });
  source.addEventListener("end", () => {
    source.close();
    box.dataset.state = "ended";
    state.textContent = "The task has closed.";
    // The page was drawn while the task ran: draw it again for its outcome and evidence.
    if (box.dataset.running === "1") window.location.reload();
  });
  source.onopen = () => {
    box.dataset.state = "open";
    state.textContent = "Following the task as it runs.";
  };
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) state.textContent = "The live stream is not available.";
    else state.textContent = "Reconnecting to the live stream…";
  };
})();
