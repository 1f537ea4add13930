/**
 * The one error the client throws for what the API refuses or cannot do.
 *
 *     AgentWorkerApiError   an HTTP error answer (status, the API's `detail`), an `error` frame on a
 *                           stream (status 0), or a stream cut more often than `maxReconnects`
 */
export class AgentWorkerApiError extends Error {
  /** The HTTP status (401, 403, 404, 422, ...), or 0 when the error came on a stream. */
  readonly status: number;
  /** The API's `detail`: a sentence, or for a 422 the list of fields at fault. */
  readonly detail: unknown;

  constructor(message: string, status: number, detail: unknown) {
    super(message);
    this.name = "AgentWorkerApiError";
    this.status = status;
    this.detail = detail;
  }
}
