/** Typed errors: one class per API error code (docs/api.md, wire/err.h). */

/**
 * An error answer of the API: `code` (e.g. "not_found"), `message`, the
 * HTTP `status`, `param` (the parameter at fault, or null) and the
 * `requestId` cubicled logged the request under (X-Request-Id).
 */
export class CubicleError extends Error {
  readonly code: string;
  readonly status: number | null;
  readonly param: string | null;
  readonly requestId: string | null;
  /** The whole answer's JSON, when it had one. */
  readonly body: unknown;

  constructor(code: string, message: string, status: number | null = null,
    param: string | null = null, requestId: string | null = null, body: unknown = null) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.param = param;
    this.requestId = requestId;
    this.body = body;
  }

  override toString(): string {
    return `${this.name}: ${this.message} (${this.code}${this.param ? `, param ${this.param}` : ""})`;
  }
}

/** 400: a parameter is missing, of the wrong type, out of range; `param` names it. */
export class InvalidParameter extends CubicleError {}
/** 400: malformed request. */
export class BadRequest extends CubicleError {}
/** 401: missing, unknown or revoked API key. */
export class Unauthorized extends CubicleError {}
/** 403: the key may not do this (a workspace key on an admin endpoint). */
export class Forbidden extends CubicleError {}
/** 404: no such computer (or not yours), action, window or file. */
export class NotFound extends CubicleError {}
/** 408: the request's body came too slowly. */
export class RequestTimeout extends CubicleError {}
/** 409: not possible in this state (a stopped computer, a display action on a sandbox). */
export class Conflict extends CubicleError {}
/** 413: a body or file over a limit. */
export class TooLarge extends CubicleError {}
/** 429: a limit is reached (running computers, requests in flight). */
export class RateLimited extends CubicleError {}
/** 500: a bug or an unexpected failure on the server. */
export class InternalError extends CubicleError {}
/** 502: the computer's agent answered badly (malformed, too large). */
export class BadGateway extends CubicleError {}
/** 503: the computer's agent does not answer, or the server is busy. */
export class Unavailable extends CubicleError {}
/** 504: a wait ran out, or bash/python ran past timeout_s (then `result` holds the partial output). */
export class Timeout extends CubicleError {
  result: unknown = null;
}
/** 507: a storage quota is reached, or the disk is full. */
export class InsufficientStorage extends CubicleError {}
/** cubicled could not be reached (code "unreachable", no status). */
export class ConnectionFailed extends CubicleError {}
/** A computer ended in the `error` state while we waited for it. */
export class ComputerFailed extends CubicleError {}
/** A template's build ended in the `error` state while we waited for it. */
export class TemplateFailed extends CubicleError {}

type ErrorClass = new (code: string, message: string, status?: number | null,
  param?: string | null, requestId?: string | null, body?: unknown) => CubicleError;

export const BY_CODE: Record<string, ErrorClass> = {
  invalid_parameter: InvalidParameter,
  bad_request: BadRequest,
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  not_found: NotFound,
  request_timeout: RequestTimeout,
  conflict: Conflict,
  too_large: TooLarge,
  limit_reached: RateLimited,
  internal: InternalError,
  bad_gateway: BadGateway,
  unavailable: Unavailable,
  timeout: Timeout,
  insufficient_storage: InsufficientStorage,
};

export const BY_STATUS: Record<number, ErrorClass> = {
  400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 408: RequestTimeout,
  409: Conflict, 413: TooLarge, 429: RateLimited, 500: InternalError, 502: BadGateway,
  503: Unavailable, 504: Timeout, 507: InsufficientStorage,
};

/** The error for an answer of `status` whose body parsed as `body` (or null). */
export function fromAnswer(status: number, body: unknown, requestId: string | null = null): CubicleError {
  const err = body && typeof body === "object" && "error" in body &&
      (body as { error: unknown }).error && typeof (body as { error: unknown }).error === "object"
    ? (body as { error: { code?: unknown; message?: unknown; param?: unknown } }).error
    : {};
  const code = typeof err.code === "string" ? err.code : null;
  const cls = (code && BY_CODE[code]) || BY_STATUS[status] || CubicleError;
  const e = new cls(code ?? `http_${status}`,
    typeof err.message === "string" && err.message ? err.message : `HTTP status ${status}`,
    status, typeof err.param === "string" ? err.param : null, requestId, body);
  if (e instanceof Timeout && body && typeof body === "object" && "exit_code" in body) {
    e.result = body;
  }
  return e;
}
