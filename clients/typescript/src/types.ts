/**
 * The client's payload types, each taken from the generated OpenAPI types (`schema.ts`) by route,
 * method and status code: when the API changes a route's body or answer, these change with it and
 * `tsc` points at every use that no longer fits.
 */

import type { components, paths } from "./schema.js";

type Schemas = components["schemas"];
type Json<T> = T extends { content: { "application/json": infer Body } } ? Body : never;

/** What `POST /v1/tasks` takes: the task's spec and, optionally, its id. */
export type StartRequest = Json<paths["/v1/tasks"]["post"]["requestBody"]>;
/** A task's spec: what any Temporal client would send as the workflow input. */
export type TaskSpec = StartRequest["spec"];
/** `POST /v1/tasks`'s answer (201 started, 200 the id existed already). */
export type StartResponse = Json<paths["/v1/tasks"]["post"]["responses"][201]>;
/** `GET /v1/tasks/{id}`: the task as the caller may see it. */
export type TaskView = Json<paths["/v1/tasks/{task_id}"]["get"]["responses"][200]>;
/** `GET /v1/tasks/{id}/pending`: the requests that name the caller. */
export type ApprovalRequest = Json<paths["/v1/tasks/{task_id}/pending"]["get"]["responses"][200]>[number];
/** `POST /v1/tasks/{id}/decisions`'s body: approve, edit or reject one pending request. */
export type DecisionRequest = Json<paths["/v1/tasks/{task_id}/decisions"]["post"]["requestBody"]>;
/** Whether the task took the decision, and why not. */
export type DecisionOutcome = Json<paths["/v1/tasks/{task_id}/decisions"]["post"]["responses"][200]>;
/** `POST /v1/tasks/{id}/input`'s body. */
export type InputRequest = Json<paths["/v1/tasks/{task_id}/input"]["post"]["requestBody"]>;
/** `/input`'s and `/cancel`'s answer (202). */
export type Accepted = Json<paths["/v1/tasks/{task_id}/cancel"]["post"]["responses"][202]>;
/** A short-lived token that opens one task's streams from a browser's `EventSource`. */
export type StreamToken = Json<paths["/v1/tasks/{task_id}/stream-token"]["post"]["responses"][200]>;

export type TaskStatus = Schemas["TaskStatus"];
export type TaskResult = Schemas["TaskResult"];
export type TaskPhase = Schemas["TaskPhase"];
/** One thing that happened to a task: the `data:` of each `/events` frame. */
export type Event = Schemas["Event"];
export type EventType = Schemas["EventType"];

/**
 * One item of `follow()`: an event (its `id` is its sequence number, what a resume starts after),
 * a gap (events the API could no longer read, never skipped silently), or the end (the task has
 * closed; `read()` now answers its result).
 */
export type FollowItem =
  | { kind: "event"; id: number; event: Event }
  | { kind: "gap"; missedFrom: number; missedTo: number }
  | { kind: "end"; phase: TaskPhase; reason: string | null };
