"""Typed exceptions: one per API error code (docs/api.md, wire/err.h)."""


class CubicleError(Exception):
    """An error answer of the API: `code` (e.g. "not_found"), `message`,
    the HTTP `status`, `param`, the parameter at fault (or None), and
    `request_id`, the X-Request-Id cubicled and envd logged it under."""

    code = None

    def __init__(self, code, message, status=None, param=None, request_id=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.param = param
        self.request_id = request_id

    def __str__(self):
        return "%s (%s%s)" % (self.message, self.code,
                              ", param %s" % self.param if self.param else "")


class InvalidParameter(CubicleError):
    """400: a parameter is missing, of the wrong type, out of range; `param` names it."""


class BadRequest(CubicleError):
    """400: malformed request."""


class Unauthorized(CubicleError):
    """401: missing, unknown or revoked API key."""


class Forbidden(CubicleError):
    """403: the key may not do this (a workspace key on an admin endpoint)."""


class NotFound(CubicleError):
    """404: no such computer (or not yours), action, window or file."""


class RequestTimeout(CubicleError):
    """408: the request's body came too slowly."""


class Conflict(CubicleError):
    """409: not possible in this state (a stopped computer, a display action on a sandbox)."""


class TooLarge(CubicleError):
    """413: a body or file over a limit."""


class RateLimited(CubicleError):
    """429: the workspace runs as many computers as it may."""


class InternalError(CubicleError):
    """500: a bug or an unexpected failure on the server."""


class BadGateway(CubicleError):
    """502: the computer's agent answered badly (malformed, too large)."""


class Unavailable(CubicleError):
    """503: the computer's agent does not answer."""


class Timeout(CubicleError):
    """504: a wait ran out, or bash/python ran past timeout_s (then `result`
    holds the partial output)."""

    result = None


class InsufficientStorage(CubicleError):
    """507: a storage quota is reached, or the disk is full."""


class ConnectionFailed(CubicleError):
    """cubicled could not be reached (code "unreachable", no status)."""


class ComputerFailed(CubicleError):
    """A computer ended in the `error` state while we waited for it."""


class TemplateFailed(CubicleError):
    """A template's build ended in the `error` state while we waited for it."""


BY_CODE = {
    "invalid_parameter": InvalidParameter,
    "bad_request": BadRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "request_timeout": RequestTimeout,
    "conflict": Conflict,
    "too_large": TooLarge,
    "limit_reached": RateLimited,
    "internal": InternalError,
    "bad_gateway": BadGateway,
    "unavailable": Unavailable,
    "timeout": Timeout,
    "insufficient_storage": InsufficientStorage,
}

BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
             408: RequestTimeout, 409: Conflict, 413: TooLarge, 429: RateLimited,
             500: InternalError, 502: BadGateway, 503: Unavailable, 504: Timeout,
             507: InsufficientStorage}


def from_answer(status, body, request_id=None):
    """The exception for an error answer (body: the parsed JSON, or None)."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        err = {}
    code = err.get("code")
    cls = BY_CODE.get(code) or BY_STATUS.get(status) or CubicleError
    return cls(code or "http_%d" % status, err.get("message") or "HTTP status %d" % status,
               status, err.get("param"), request_id)
