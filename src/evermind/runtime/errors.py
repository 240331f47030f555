"""The runtime's HTTP error: an :class:`ApiError` becomes an OpenAI-style JSON error (native-only).

Every route raises :class:`ApiError` (or lets a library error through, which the app maps);
the app turns it into ``{"error": {"message", "type", "code"}}`` with the right status, or, on
the Anthropic-shaped routes (``/v1/messages``, ``/v1/messages/count_tokens``), into
Anthropic's ``{"type": "error", "error": {"type", "message", "code"}}`` (:func:`shaped`), so
each SDK reads the error it expects.
"""

from __future__ import annotations

from typing import Any

from evermind.errors import EvermindError

#: OpenAI error ``type`` by HTTP status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}


class ApiError(EvermindError):
    """A request the runtime refuses, with its HTTP status and OpenAI error fields.

    Args:
        status: The HTTP status code (4xx for the caller's mistakes).
        message: What was expected, what was received, and a hint.
        code: A short machine-readable reason, e.g. ``"model_not_found"``.
        headers: Extra response headers (``Retry-After``, ``WWW-Authenticate``).
    """

    def __init__(
        self, status: int, message: str, code: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        """The OpenAI error type for the status."""
        return ERROR_TYPES.get(self.status, "server_error" if self.status >= 500 else "error")

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        return error_body(self.message, self.type, self.code)


def error_body(message: str, type_: str, code: str) -> dict[str, Any]:
    """``{"error": {"message", "type", "code"}}``."""
    return {"error": {"message": message, "type": type_, "code": code}}


#: Anthropic error ``type`` by HTTP status (its documented errors; other 5xx: ``api_error``).
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
#: Paths whose clients speak Anthropic's API (its error shape).
ANTHROPIC_PATHS = ("/v1/messages",)


def shaped(path: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (an OpenAI-style error) in the shape the route's clients expect: Anthropic's
    on :data:`ANTHROPIC_PATHS` (its ``type`` by status; the message and ``code`` kept)."""
    if not path.startswith(ANTHROPIC_PATHS):
        return body
    error = body.get("error", {})
    kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {
        "type": "error",
        "error": {"type": kind, "message": error.get("message", ""), "code": error.get("code")},
    }


#: The client protocol of each route where an upstream's refusal is relayed in its own words.
ROUTE_PROTOCOLS = {
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic",
    "/v1/chat/completions": "openai",
    "/v1/responses": "openai",
}


def provider_body(
    path: str, status: int, provider: str, reported: dict[str, str | None] | None
) -> dict[str, Any] | None:
    """An upstream's refusal as the upstream said it (its error ``type``, ``message`` and, for
    OpenAI, ``param`` and ``code``), when the route speaks that upstream's protocol; None
    otherwise (then the runtime's own error body)."""
    if reported is None or ROUTE_PROTOCOLS.get(path.rstrip("/")) != provider:
        return None
    message = reported.get("message") or ""
    if provider == "anthropic":
        kind = reported.get("type") or ANTHROPIC_TYPES.get(status, "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {
        "error": {
            "message": message,
            "type": reported.get("type") or ERROR_TYPES.get(status, "invalid_request_error"),
            "param": reported.get("param"),
            "code": reported.get("code"),
        }
    }
