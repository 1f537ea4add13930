/**
 * A typed client for agent-worker's HTTP API: start, read, follow (Server-Sent Events, resumed with
 * `Last-Event-ID`), decide, input, cancel. Types are generated from the API's OpenAPI document
 * (`openapi.json` -> `src/schema.ts`, by openapi-typescript).
 */

export { AgentWorkerApi } from "./client.js";
export type { ClientOptions } from "./client.js";
export { AgentWorkerApiError } from "./errors.js";
export type { FollowOptions } from "./follow.js";
export type * from "./types.js";
export type { components, paths } from "./schema.js";
