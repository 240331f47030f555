"""What an upstream may send back, checked before anything above the bridges sees it
(browser-safe: standard library only).

An upstream is outside the gateway's trust: a broken server, a proxy answering in its place or
a hostile one can send any bytes. Every value the wire parsers (:mod:`evermind.bridges.wire`)
take from an answer passes through these checks, so each failure is one
:class:`~evermind.errors.UpstreamError` (the gateway's 4xx/5xx or stream error event), never a
``KeyError`` or ``OverflowError`` that becomes a 500, and only a complete, well-formed answer
reaches the cache:

- shapes: :func:`mapping`, :func:`items`, :func:`text`, :func:`index`, :func:`count` (token
  counts: whole numbers in ``[0, MAX_USAGE_TOKENS]``) and :func:`parse_json` (JSON text,
  depth bombs included); a violation is ``upstream_malformed``;
- :func:`check_complete`: an answer without text or tool call, or a tool call without its id
  or name, is ``upstream_malformed``; :func:`check_size`: past a size limit,
  ``upstream_too_large``; :func:`read_limited` reads a body no longer than a limit;
- the HTTP failures: :func:`error_code`, :func:`retry_after` (finite and bounded only),
  :func:`upstream_error`, :func:`stream_error`, :func:`stream_cut`;
- :func:`excerpt`: a quoted piece of an upstream's text, secrets removed *before* it is cut,
  so a cut never leaves part of a key behind.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from evermind.bridges.base import Completion
from evermind.errors import UpstreamError

__all__ = [
    "MALFORMED",
    "MAX_ANSWER_CHARS",
    "MAX_EVENT_CHARS",
    "MAX_RETRY_AFTER_S",
    "MAX_USAGE_TOKENS",
    "TOO_LARGE",
    "body_limit",
    "broke_off",
    "check_complete",
    "check_size",
    "count",
    "error_code",
    "excerpt",
    "index",
    "items",
    "malformed",
    "mapping",
    "parse_json",
    "read_limited",
    "retry_after",
    "scrub",
    "stream_cut",
    "stream_error",
    "text",
    "upstream_error",
]

#: The error codes of this module's failures (the gateway answers both with 502).
MALFORMED = "upstream_malformed"
TOO_LARGE = "upstream_too_large"
#: Characters of text and tool arguments an answer may hold (the gateway's default; an
#: upstream's ``max_answer_chars`` sets its own).
MAX_ANSWER_CHARS = 1_000_000
#: Characters one server-sent event may hold (an event never carries a whole answer).
MAX_EVENT_CHARS = 4 * 1024 * 1024
#: The largest token count an upstream may report (10^8: beyond any context window).
MAX_USAGE_TOKENS = 100_000_000
#: The longest wait a ``retry-after`` header may ask for (a day); longer ones are cut to it.
MAX_RETRY_AFTER_S = 86_400.0
#: The largest tool-call or choice index taken from an answer.
MAX_INDEX = 1024
#: Characters of an upstream's own words quoted in an error message.
EXCERPT_CHARS = 500


def malformed(provider: str, detail: str) -> UpstreamError:
    """The error of an answer that is not what the protocol says (``upstream_malformed``)."""
    return UpstreamError(
        f"{provider} upstream sent a malformed answer: {detail}; hint: the upstream (or a "
        "proxy in front of it) does not speak its protocol; nothing was cached",
        provider=provider,
        code=MALFORMED,
    )


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def mapping(
    value: object, provider: str, where: str, *, required: bool = False
) -> Mapping[str, Any]:
    """``value`` as a JSON object; None is ``{}`` unless ``required``."""
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise malformed(provider, f"{where} must be an object, got {_kind(value)}")
    return value


def items(value: object, provider: str, where: str, *, required: bool = False) -> list[Any]:
    """``value`` as a JSON array; None is ``[]`` unless ``required``."""
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise malformed(provider, f"{where} must be an array, got {_kind(value)}")
    return value


def text(value: object, provider: str, where: str, *, required: bool = False) -> str:
    """``value`` as a string; None is ``""`` unless ``required``."""
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise malformed(provider, f"{where} must be a string, got {_kind(value)}")
    return value


def _whole(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _shown(value: object) -> str:
    """A value for an error message: its repr when short, else only its kind and size (a
    cut repr could hold part of a secret; a whole one is scrubbed where the message is)."""
    shown = repr(value)
    if len(shown) <= 40:
        return shown
    return f"a {_kind(value)} of {len(shown)} characters"


def count(value: object, provider: str, where: str) -> int:
    """A token count: a whole number in ``[0, MAX_USAGE_TOKENS]`` (None: 0)."""
    if value is None:
        return 0
    number = _whole(value)
    if number is None or not 0 <= number <= MAX_USAGE_TOKENS:
        limits = f"[0, {MAX_USAGE_TOKENS}]"
        raise malformed(provider, f"{where} must be a token count in {limits}, got {_shown(value)}")
    return number


def index(value: object, provider: str, where: str) -> int:
    """A choice or block index: a whole number in ``[0, MAX_INDEX]`` (None: 0)."""
    if value is None:
        return 0
    number = _whole(value)
    if number is None or not 0 <= number <= MAX_INDEX:
        raise malformed(
            provider, f"{where} must be an index in [0, {MAX_INDEX}], got {_shown(value)}"
        )
    return number


def parse_json(data: str | bytes, provider: str, what: str, secrets: Iterable[str] = ()) -> Any:
    """``data`` parsed as JSON (any value); not JSON, or nested past the parser's depth, is
    ``upstream_malformed`` (quoting the start of ``data``, ``secrets`` scrubbed first)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:
        shown = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        reason = "nested too deeply" if isinstance(err, RecursionError) else "not JSON"
        quoted = excerpt(repr(scrub(shown, secrets)), 200)
        raise malformed(provider, f"{what} is {reason}: {quoted}") from None


def check_complete(completion: Completion) -> Completion:
    """``completion`` when it is a whole answer: some text or a tool call, every tool call
    with its id and name.

    Raises:
        UpstreamError: ``upstream_malformed`` (an empty answer, a tool call without an id).
    """
    provider = completion.provider
    if not completion.text.strip() and not completion.tool_calls:
        raise malformed(provider, "an answer with neither text nor a tool call")
    for i, call in enumerate(completion.tool_calls):
        if not call.id or not call.name:
            missing = "id" if not call.id else "name"
            raise malformed(provider, f"tool call {i} has no {missing}")
    return completion


def answer_chars(completion: Completion) -> int:
    """The characters of an answer's text and tool-call arguments."""
    return len(completion.text) + sum(
        len(json.dumps(call.arguments)) for call in completion.tool_calls
    )


def check_size(chars: int, limit: int, provider: str, what: str = "answer (characters)") -> None:
    """Refuses ``what`` (an answer, a body, an event) of ``chars`` characters (or bytes) past
    ``limit`` (``upstream_too_large``)."""
    if chars > limit:
        raise UpstreamError(
            f"{provider} upstream's {what} exceeds the limit of {limit}; hint: ask for fewer "
            "max_tokens, or raise the upstream's max_answer_chars in the gateway's upstreams "
            "file; nothing was cached",
            provider=provider,
            code=TOO_LARGE,
        )


def body_limit(max_answer_chars: int) -> int:
    """Bytes a JSON answer body may take for an answer of ``max_answer_chars`` characters:
    each character escaped (``\\uXXXX``, 6 bytes), plus a megabyte for the envelope."""
    return 6 * max_answer_chars + 1024 * 1024


async def read_limited(
    chunks: AsyncIterator[bytes], limit: int, provider: str, declared: str | None = None
) -> bytes:
    """A response body read to its end, refused (``upstream_too_large``) past ``limit``
    bytes, before it is all in memory. ``declared``: its ``content-length``, checked first."""
    if declared is not None and declared.isdigit():
        check_size(int(declared), limit, provider, "answer body (bytes)")
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        check_size(len(body), limit, provider, "answer body (bytes)")
    return bytes(body)


# --- secrets ---------------------------------------------------------------------------


def scrub(value: str, secrets: Iterable[str]) -> str:
    """``value`` with every secret replaced by ``***`` (longest first)."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        value = value.replace(secret, "***")
    return value


def excerpt(value: str, limit: int = EXCERPT_CHARS, secrets: Iterable[str] = ()) -> str:
    """At most ``limit`` characters of ``value``, secrets scrubbed before the cut."""
    value = scrub(value, secrets)
    return value if len(value) <= limit else value[:limit] + "..."


# --- the HTTP failures -------------------------------------------------------------------

#: Codes of UpstreamError by HTTP status (anything else: 4xx bad request, 5xx unavailable).
_CODES = {401: "upstream_auth", 403: "upstream_auth", 429: "upstream_rate_limited"}


def error_code(status: int | None) -> str:
    """The UpstreamError ``code`` of an HTTP status (None: no response at all)."""
    if status in _CODES:
        return _CODES[status]
    if status is None or status >= 500 or status == 408:
        return "upstream_unavailable"
    return "upstream_bad_request" if 400 <= status < 500 else "upstream_error"


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a ``retry-after`` (or ``retry-after-ms``) header asks to wait; None if absent
    or not a finite number of seconds >= 0 (``inf``, ``nan``, an HTTP date); a wait past
    :data:`MAX_RETRY_AFTER_S` is cut to it.

    Header names are matched case-insensitively.
    """
    lower = {str(k).lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            seconds = float(lower[name]) / scale
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return min(seconds, MAX_RETRY_AFTER_S)
    return None


def upstream_error(
    provider: str,
    status: int | None,
    headers: Mapping[str, str],
    body: object,
    secrets: Iterable[str] = (),
    *,
    shape: str | None = None,
) -> UpstreamError:
    """The :class:`UpstreamError` of an HTTP error response (``body``: parsed JSON or text).

    The message quotes the upstream's own words (``error.message`` in both protocols), at
    most :data:`EXCERPT_CHARS` of them, with ``secrets`` (the key the request carried)
    scrubbed before the cut. ``reported`` (what a relay in the same protocol answers with)
    is the error object; on a 5xx only when ``body`` is the whole body and a well-formed
    error of ``shape``'s protocol (:func:`well_formed_error`): then the client gets the
    upstream's status, otherwise the failure is the gateway's finding (502).
    """
    detail: object = body
    if isinstance(body, Mapping):
        # The whole body ({"error": {...}}), or its error object (as the openai SDK keeps it).
        error = body.get("error", body)
        detail = error.get("message") or error.get("type") if isinstance(error, Mapping) else error
    quoted = excerpt(str(detail), EXCERPT_CHARS, secrets) if detail else ""
    code = error_code(status)
    hint = {
        "upstream_auth": "hint: check the API key",
        "upstream_rate_limited": "hint: slow down, or wait retry_after seconds",
        "upstream_bad_request": "hint: the upstream refused the request as sent",
        "upstream_unavailable": "hint: the upstream failed; try again later",
    }.get(code, "")
    message = f"{provider} upstream answered HTTP {status}: {quoted or '(no detail)'}; {hint}"
    return UpstreamError(
        message.rstrip("; "),
        provider=provider,
        status=status,
        retry_after=retry_after(headers),
        code=code,
        reported=(
            reported_error(body, secrets)
            if status is None or status < 500 or well_formed_error(shape, body)
            else None
        ),
    )


def well_formed_error(shape: str | None, body: object) -> bool:
    """Whether ``body`` (an error response's whole JSON body) is an error in the form of the
    ``shape`` protocol: OpenAI's ``{"error": {"message": "...", ...}}``, Anthropic's
    ``{"type": "error", "error": {"type": "...", "message": "..."}}`` (None: no shape is)."""
    if not isinstance(body, Mapping) or not isinstance(body.get("error"), Mapping):
        return False
    error = body["error"]
    if not isinstance(error.get("message"), str) or not error["message"]:
        return False
    if shape == "openai":
        return True
    if shape == "anthropic":
        return body.get("type") == "error" and isinstance(error.get("type"), str)
    return False


def reported_error(body: object, secrets: Iterable[str] = ()) -> dict[str, str | None] | None:
    """The fields of an error body's error object both protocols name (``type``, ``message``,
    ``param``, ``code``), as strings (or None), secrets scrubbed, each cut to
    :data:`EXCERPT_CHARS`; None when the body has no error object."""
    if not isinstance(body, Mapping):
        return None
    error = body.get("error", body)
    if not isinstance(error, Mapping) or not error.get("message"):
        return None
    return {
        name: None if error.get(name) is None else excerpt(str(error[name]), EXCERPT_CHARS, secrets)
        for name in ("type", "message", "param", "code")
    }


def stream_error(provider: str, error: object, secrets: Iterable[str] = ()) -> UpstreamError:
    """The error an upstream reported in a 200 answer: an ``error`` event in a stream, or an
    ``{"error": ...}`` body (the event's data or its error object).

    ``rate_limit_error`` → ``upstream_rate_limited``; anything else (``overloaded_error``,
    ``api_error``) → ``upstream_unavailable``.
    """
    if isinstance(error, Mapping) and isinstance(error.get("error"), Mapping):
        error = error["error"]
    kind = str(error.get("type", "")) if isinstance(error, Mapping) else ""
    detail = str(error.get("message", "")) if isinstance(error, Mapping) else str(error)
    code = "upstream_rate_limited" if kind == "rate_limit_error" else "upstream_unavailable"
    return UpstreamError(
        f"{provider} upstream reported an error: {excerpt(kind or 'error', 100)}: "
        f"{excerpt(detail, EXCERPT_CHARS, secrets)}",
        provider=provider,
        code=code,
    )


def broke_off(provider: str, detail: str) -> UpstreamError:
    """The error of an answer whose body broke off (not streamed: ``upstream_unavailable``)."""
    return UpstreamError(
        f"{provider} upstream dropped the connection before its answer ended: "
        f"{excerpt(detail)}; hint: retry the request",
        provider=provider,
        code="upstream_unavailable",
    )


def stream_cut(provider: str, detail: str = "") -> UpstreamError:
    """The error of a stream that ended before its final event (``message_stop``/``[DONE]``)."""
    suffix = f": {excerpt(detail)}" if detail else ""
    return UpstreamError(
        f"{provider} upstream cut the stream before its end{suffix}; hint: retry the request",
        provider=provider,
        code="upstream_stream_cut",
    )
