/**
 * `AgentWorkerApi`: agent-worker's HTTP API (`agent-worker api`) from TypeScript, over the
 * platform's `fetch` (Node 18+, browsers, Deno, Bun). Every body and answer is typed from the API's
 * OpenAPI document (`types.ts`, from the generated `schema.ts`).
 */

import { AgentWorkerApiError } from "./errors.js";
import { follow } from "./follow.js";
import type { FollowOptions } from "./follow.js";
import type {
  Accepted,
  ApprovalRequest,
  DecisionOutcome,
  DecisionRequest,
  FollowItem,
  StartResponse,
  StreamToken,
  TaskSpec,
  TaskView,
} from "./types.js";

export interface ClientOptions {
  /** The API's base URL, e.g. `http://127.0.0.1:8091`. */
  baseUrl: string;
  /** A bearer token from the API's tokens file (token mode). */
  token?: string;
  /** Headers sent with every request (header mode behind a proxy, tracing). */
  headers?: Record<string, string>;
  /** The `fetch` to use; the global one by default. */
  fetch?: typeof fetch;
}

/** A task id in a URL: each segment escaped, its `/` kept (`acme/report-1`, as the API routes it). */
function taskPath(taskId: string): string {
  return `/v1/tasks/${taskId.split("/").map(encodeURIComponent).join("/")}`;
}

async function failure(response: Response): Promise<AgentWorkerApiError> {
  const text = await response.text();
  let detail: unknown = text;
  try {
    detail = (JSON.parse(text) as { detail?: unknown }).detail ?? text;
  } catch {
    // not JSON (a proxy's page): the text is the detail
  }
  const said = typeof detail === "string" ? detail : JSON.stringify(detail);
  return new AgentWorkerApiError(`${response.status}: ${said}`, response.status, detail);
}

export class AgentWorkerApi {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.headers = { ...options.headers };
    if (options.token !== undefined) this.headers.Authorization = `Bearer ${options.token}`;
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  private async send(method: string, path: string, body?: unknown, init: RequestInit = {}): Promise<Response> {
    const headers: Record<string, string> = { ...this.headers, ...(init.headers as Record<string, string>) };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await this.fetch(this.baseUrl + path, {
      ...init,
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!response.ok) throw await failure(response);
    return response;
  }

  private async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await (await this.send(method, path, body)).json()) as T;
  }

  /**
   * Start a task. A chosen `taskId` is scoped to the spec's tenant (`acme/report-1`: the `task_id`
   * answered); starting an id that exists starts nothing (`started: false`).
   */
  start(spec: TaskSpec, options: { taskId?: string } = {}): Promise<StartResponse> {
    return this.json("POST", "/v1/tasks", { spec, task_id: options.taskId ?? null });
  }

  /** The task: its `status` while it runs, its `result` once it has closed. */
  read(taskId: string): Promise<TaskView> {
    return this.json("GET", taskPath(taskId));
  }

  /** The task's pending approval requests that name the caller. */
  pending(taskId: string): Promise<ApprovalRequest[]> {
    return this.json("GET", `${taskPath(taskId)}/pending`);
  }

  /**
   * Decide one pending request: `approve`, `edit` (with `edited_args`) or `reject` (with a `reason`,
   * which the agent sees). `accepted: false` says why the task did not take it.
   */
  decide(taskId: string, decision: DecisionRequest): Promise<DecisionOutcome> {
    return this.json("POST", `${taskPath(taskId)}/decisions`, decision);
  }

  /** Approve `request` as proposed, at the version the caller saw. */
  approve(taskId: string, request: ApprovalRequest, reason?: string): Promise<DecisionOutcome> {
    return this.decide(taskId, {
      request_id: request.request_id,
      version: request.version,
      decision: "approve",
      reason: reason ?? null,
    });
  }

  /** Follow-up input for the agent's next turn (refused input is recorded as ignored). */
  input(taskId: string, text: string): Promise<Accepted> {
    return this.json("POST", `${taskPath(taskId)}/input`, { text });
  }

  /** Ask the task to cancel: its sandbox is destroyed, a write in flight settles first. */
  cancel(taskId: string): Promise<Accepted> {
    return this.json("POST", `${taskPath(taskId)}/cancel`, {});
  }

  /** A short-lived token for a browser's `EventSource` on this task's streams only. */
  streamToken(taskId: string): Promise<StreamToken> {
    return this.json("POST", `${taskPath(taskId)}/stream-token`, {});
  }

  /**
   * The task's events, in order, until it closes (the `end` item). `after` resumes after an event
   * id; a cut connection is reopened after the last event seen. Breaking out of the loop closes the
   * connection.
   *
   * ```ts
   * for await (const item of api.follow(taskId)) {
   *   if (item.kind === "event") console.log(item.id, item.event.type);
   * }
   * ```
   */
  follow(taskId: string, options: FollowOptions = {}): AsyncGenerator<FollowItem> {
    const path = `${taskPath(taskId)}/events`;
    return follow(
      (after, signal) =>
        this.send("GET", path, undefined, {
          signal,
          headers: {
            Accept: "text/event-stream",
            ...(after === undefined ? {} : { "Last-Event-ID": String(after) }),
          },
        }),
      options,
    );
  }

  /**
   * Follow the task to its end and read it: its `result` (`TaskView.result`), or the view as it
   * is when the task closed without one.
   */
  async wait(taskId: string, options: FollowOptions = {}): Promise<TaskView> {
    for await (const item of this.follow(taskId, options)) {
      if (item.kind === "end") break;
    }
    return this.read(taskId);
  }
}
