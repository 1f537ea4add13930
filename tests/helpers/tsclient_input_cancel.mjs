// The TypeScript client's other calls against a live API (tests/test_typescript_client.py): start
// with a chosen id, twice; follow to the approval request; input; cancel; follow on to the end;
// read; and the errors it throws. One JSON line per step on stdout.
import { readFileSync } from "node:fs";
import { AgentWorkerApi, AgentWorkerApiError } from "@agent-worker/client";

const baseUrl = process.env.AGENT_WORKER_API_URL;
const api = new AgentWorkerApi({ baseUrl, token: process.env.AGENT_WORKER_API_TOKEN });
const out = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
const spec = JSON.parse(readFileSync("examples/monthly_report/task.json", "utf8"));

const first = await api.start(spec, { taskId: process.env.TASK_ID });
const again = await api.start(spec, { taskId: process.env.TASK_ID });
out("start", { first, again });
const taskId = first.task_id;

let last;
for await (const item of api.follow(taskId)) {
  if (item.kind !== "event") continue;
  last = item.id;
  if (item.event.type === "approval.requested") break;
}
out("input", { answer: await api.input(taskId, "use the March figures too") });
out("cancel", { answer: await api.cancel(taskId) });

const events = [];
let end;
for await (const item of api.follow(taskId, { after: last })) {
  if (item.kind === "event") events.push({ id: item.id, type: item.event.type, data: item.event.data });
  if (item.kind === "end") end = item;
}
out("followed", { after: last, events, end });
out("read", { view: await api.read(taskId) });

const attempts = {
  missing: () => api.read("acme/no-such-task"),
  invalid: () => api.start({ ...spec, budgets: { ...spec.budgets, max_turns: 0 } }),
  anonymous: () => new AgentWorkerApi({ baseUrl }).read(taskId),
};
for (const [name, attempt] of Object.entries(attempts)) {
  try {
    await attempt();
    out("error", { name, thrown: false });
  } catch (err) {
    out("error", { name, thrown: err instanceof AgentWorkerApiError, status: err.status, detail: err.detail });
  }
}
