"""Gemini's ``generateContent`` wire format, as pure functions (browser-safe: standard
library only).

The REST format Google documents for the Gemini API (``POST
/v1beta/models/{model}:generateContent``, and ``:streamGenerateContent?alt=sse`` for a
stream) and Vertex AI (the same bodies under ``/v1/projects/{p}/locations/{l}/publishers/
google/models/{model}``), in both directions:

- request: :func:`gemini_body` turns a :class:`ChatRequest` into the JSON body: ``contents``
  of ``parts`` (``text``, ``functionCall``, ``functionResponse``), ``systemInstruction`` (the
  static prompt, then the facts: two parts, the stable one first, so Gemini's implicit
  prefix cache keeps hitting), ``tools.functionDeclarations`` (the neutral tool's JSON Schema
  as ``parametersJsonSchema``) and ``generationConfig`` (``maxOutputTokens``,
  ``temperature``, ``stopSequences``; ``top_p``, ``top_k``, ``seed``, ``presence_penalty``,
  ``frequency_penalty`` of ``extra``); any other ``extra`` key goes into the body as it is
  (a ``generationConfig`` object is merged into the one built here);
- response: :func:`gemini_completion` (a whole answer) and :class:`GeminiStream` (the
  chunks of a stream, each a ``GenerateContentResponse``) read ``candidates[0]`` (its text
  parts, ``thought`` parts left out, and its ``functionCall`` parts), ``finishReason`` and
  ``usageMetadata`` (:func:`gemini_usage`), every value checked by
  :mod:`evermind.bridges.answers`;
- errors: :func:`gemini_error` maps Google's ``{"error": {"code", "message", "status",
  "details"}}`` bodies (an invalid key is Google's 400 with reason ``API_KEY_INVALID``:
  ``upstream_auth``; a 429's wait is its ``retry-after`` header or its ``RetryInfo``
  detail's ``retryDelay``).

Tool-call ids. Gemini names a call by its function (an ``id`` is optional and often absent)
and a thinking model signs its calls (``thoughtSignature``), which must come back with the
call in the next turn. The contract's :class:`ToolCall` has one opaque ``id``, so a call
without an id of its own, or with a signature, gets an id that carries both
(:func:`call_id`); :func:`gemini_body` reads them back (:func:`call_parts`), and finds each
tool result's function name on the assistant turn that made the call.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from evermind.bridges import answers
from evermind.bridges.base import ChatRequest, Completion, Message, ToolCall, Usage
from evermind.bridges.streams import _Fold
from evermind.bridges.wire import _tool_name, finish_of
from evermind.errors import InputError, UpstreamError

__all__ = [
    "API_VERSION",
    "DEFAULT_BASE_URL",
    "GEMINI_FINISH",
    "GeminiStream",
    "call_id",
    "call_parts",
    "gemini_body",
    "gemini_completion",
    "gemini_error",
    "gemini_path",
    "gemini_usage",
]

#: The Gemini API's base URL and the API version its documented REST examples use.
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
API_VERSION = "v1beta"
#: Gemini's ``finishReason`` → the contract's (unknown ones are ``stop``). A candidate that
#: calls a function ends with ``STOP``: its tool calls make it ``tool_calls``.
GEMINI_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}
#: ``extra`` keys (the neutral, snake_case names) that are ``generationConfig`` fields.
GENERATION_EXTRAS = {
    "top_p": "topP",
    "top_k": "topK",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
}
#: The prefix of the ids :func:`call_id` makes.
CALL_ID_PREFIX = "gemini_"
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


# --- tool-call ids -------------------------------------------------------------------------


def call_id(own: str, signature: str) -> str:
    """The contract's id of a Gemini call: its ``own`` id when it has one and no
    ``signature``; else an opaque id carrying both (a fresh one when neither is given)."""
    if own and not signature:
        return own
    packed = json.dumps({"id": own, "sig": signature, "n": uuid.uuid4().hex[:12]})
    return CALL_ID_PREFIX + base64.urlsafe_b64encode(packed.encode()).decode().rstrip("=")


def call_parts(identifier: str) -> tuple[str, str]:
    """``(own id, thoughtSignature)`` of a contract id (``""`` where there is none): read back
    from an id :func:`call_id` made; any other id is the call's own."""
    if not identifier.startswith(CALL_ID_PREFIX):
        return identifier, ""
    encoded = identifier[len(CALL_ID_PREFIX) :]
    try:
        packed = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return identifier, ""
    if not isinstance(packed, dict):
        return identifier, ""
    own, signature = packed.get("id"), packed.get("sig")
    return (
        own if isinstance(own, str) else "",
        signature if isinstance(signature, str) else "",
    )


# --- requests ------------------------------------------------------------------------------


def gemini_path(model: str, stream: bool, api_version: str = API_VERSION) -> str:
    """The Gemini API path of ``model`` (``models/`` added unless the name has a ``/``)."""
    name = model if "/" in model else f"models/{model}"
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/{api_version}/{name}:{method}"


def gemini_body(request: ChatRequest, *, stream: bool = False) -> dict[str, Any]:
    """The JSON body of ``generateContent`` (and ``streamGenerateContent``: the same body,
    ``stream`` only changes the path) for ``request``.

    Raises:
        InputError: A tool without a name, a tool result without the id of an earlier call,
            or a content block Gemini has no part for.
    """
    body: dict[str, Any] = {"contents": _contents(request.messages)}
    system = [{"text": text} for text in (request.system, request.facts) if text]
    if system:
        body["systemInstruction"] = {"parts": system}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
    config: dict[str, Any] = {}
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.stop:
        config["stopSequences"] = list(request.stop)
    rest = dict(request.extra)
    for key, name in GENERATION_EXTRAS.items():
        if key in rest:
            config[name] = rest.pop(key)
    given = rest.pop("generationConfig", None)
    if isinstance(given, Mapping):
        config.update(given)
    elif given is not None:
        raise InputError(
            f"ChatRequest.extra: generationConfig must be an object, got {type(given).__name__}"
        )
    if config:
        body["generationConfig"] = config
    body.update(rest)
    return body


def _declaration(tool: Mapping[str, Any]) -> dict[str, Any]:
    declared: dict[str, Any] = {
        "name": _tool_name(tool),
        "parametersJsonSchema": tool.get("input_schema") or {"type": "object", "properties": {}},
    }
    if tool.get("description"):
        declared["description"] = str(tool["description"])
    return declared


def _contents(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id -> function name, from the assistant turns so far
    for i, message in enumerate(messages):
        if message.role == "tool":
            result = {"functionResponse": _function_response(message, names, i)}
            previous = out[-1] if out else None
            if previous is not None and previous.get("_results"):
                previous["parts"].append(result)  # a turn's results answer together
            else:
                out.append({"role": "user", "parts": [result], "_results": True})
            continue
        parts = _parts(message.content, i)
        if message.role == "assistant":
            for call in message.tool_calls:
                names[call.id] = call.name
                own, signature = call_parts(call.id)
                function: dict[str, Any] = {"name": call.name, "args": dict(call.arguments)}
                if own:
                    function["id"] = own
                part: dict[str, Any] = {"functionCall": function}
                if signature:
                    part["thoughtSignature"] = signature
                parts.append(part)
        out.append({"role": "model" if message.role == "assistant" else "user", "parts": parts})
    for content in out:
        content.pop("_results", None)
    return out


def _function_response(message: Message, names: Mapping[str, str], at: int) -> dict[str, Any]:
    if not message.tool_call_id:
        raise InputError(
            f"ChatRequest: messages[{at}] (role='tool') needs tool_call_id (the id of the call "
            "it answers)"
        )
    name = names.get(message.tool_call_id)
    if name is None:
        raise InputError(
            f"ChatRequest: messages[{at}] answers tool call {message.tool_call_id!r}, which no "
            "earlier assistant turn made; hint: Gemini needs the function's name, so keep the "
            "assistant turn with its tool_calls before the results"
        )
    text = message.text()
    try:
        parsed = json.loads(text) if text.strip().startswith("{") else None
    except (ValueError, RecursionError):
        parsed = None
    response: dict[str, Any] = {"name": name, "response": parsed or {"output": text}}
    own, _ = call_parts(message.tool_call_id)
    if own:
        response["id"] = own
    return response


def _parts(content: str | list[dict[str, Any]], at: int) -> list[dict[str, Any]]:
    """A turn's parts: its text, or its blocks (text blocks; Gemini's own parts, which have
    no ``type``, as they are)."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"text": str(block.get("text", ""))})
        elif isinstance(block, dict) and kind is None:
            parts.append(dict(block))
        else:
            raise InputError(
                f"ChatRequest: messages[{at}].content[{j}]: block type {kind!r} has no Gemini "
                "part; expected text blocks or Gemini parts (inlineData, fileData, ...)"
            )
    return parts


# --- responses -----------------------------------------------------------------------------


def gemini_usage(usage: object, provider: str = "vertex") -> Usage:
    """:class:`Usage` of a ``usageMetadata`` object.

    ``promptTokenCount`` counts the whole prompt, cached part included: the cached part
    (``cachedContentTokenCount``) is split off so ``input_tokens`` is uncached input (plus
    ``toolUsePromptTokenCount``, the prompt of a server-side tool). Output is the answer's
    tokens and a thinking model's ``thoughtsTokenCount`` (billed as output). Gemini reports
    no cache writes.

    Raises:
        UpstreamError: Not an object, or a count that is not a whole number in range.
    """
    fields = answers.mapping(usage, provider, "usageMetadata")

    def tokens(name: str) -> int:
        return answers.count(fields.get(name), provider, f"usageMetadata.{name}")

    prompt, cached = tokens("promptTokenCount"), tokens("cachedContentTokenCount")
    return Usage(
        input_tokens=max(prompt - cached, 0) + tokens("toolUsePromptTokenCount"),
        output_tokens=tokens("candidatesTokenCount") + tokens("thoughtsTokenCount"),
        cache_read_tokens=min(cached, prompt) if prompt else cached,
    )


class _Candidate:
    """What the parts of one candidate said so far (a whole answer or a stream's chunks)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.finish: str | None = None

    def read(self, candidate: Mapping[str, Any], provider: str, where: str) -> str:
        """Takes a candidate (or a chunk's piece of one); returns the text it adds."""
        content = answers.mapping(candidate.get("content"), provider, f"{where}.content")
        added = []
        for k, raw in enumerate(answers.items(content.get("parts"), provider, f"{where}.parts")):
            at = f"{where}.content.parts[{k}]"
            part = answers.mapping(raw, provider, at, required=True)
            if "functionCall" in part:
                self.calls.append(_call(part, provider, at))
            elif part.get("thought") is not True:  # a thinking model's thoughts: not the answer
                added.append(answers.text(part.get("text"), provider, f"{at}.text"))
        finish = answers.text(candidate.get("finishReason"), provider, f"{where}.finishReason")
        self.finish = finish or self.finish
        text = "".join(added)
        if text:
            self.text.append(text)
        return text

    def completion(
        self, provider: str, model: str, usage: Usage, ident: str, blocked: str
    ) -> Completion:
        if self.finish is None and blocked:
            raise _blocked(provider, f"the prompt was blocked ({blocked})")
        finish = finish_of(GEMINI_FINISH, self.finish, provider, "candidates[0].finishReason")
        text = "".join(self.text)
        if finish == "content_filter" and not text and not self.calls:
            raise _blocked(provider, f"the answer was blocked ({self.finish})")
        return answers.check_complete(
            Completion(
                text=text,
                model=model,
                provider=provider,
                finish_reason="tool_calls" if self.calls else finish,
                usage=usage,
                tool_calls=tuple(self.calls),
                id=ident,
            )
        )


def _call(part: Mapping[str, Any], provider: str, where: str) -> ToolCall:
    function = answers.mapping(part.get("functionCall"), provider, f"{where}.functionCall")
    arguments = answers.mapping(function.get("args"), provider, f"{where}.functionCall.args")
    own = answers.text(function.get("id"), provider, f"{where}.functionCall.id")
    signature = answers.text(part.get("thoughtSignature"), provider, f"{where}.thoughtSignature")
    return ToolCall(
        call_id(own, signature),
        answers.text(function.get("name"), provider, f"{where}.functionCall.name"),
        dict(arguments),
    )


def _blocked(provider: str, detail: str) -> UpstreamError:
    return UpstreamError(
        f"{provider} upstream refused: {detail}; hint: Gemini's safety settings stopped it, "
        "rephrase the request or adjust safetySettings",
        provider=provider,
        code="upstream_bad_request",
    )


def _head(data: Mapping[str, Any], provider: str) -> tuple[str, str, str]:
    """(modelVersion, responseId, promptFeedback.blockReason) of a response or chunk."""
    feedback = answers.mapping(data.get("promptFeedback"), provider, "promptFeedback")
    return (
        answers.text(data.get("modelVersion"), provider, "modelVersion"),
        answers.text(data.get("responseId"), provider, "responseId"),
        answers.text(feedback.get("blockReason"), provider, "promptFeedback.blockReason"),
    )


def _first_candidate(data: Mapping[str, Any], provider: str) -> Mapping[str, Any] | None:
    candidates = answers.items(data.get("candidates"), provider, "candidates")
    for i, raw in enumerate(candidates):
        candidate = answers.mapping(raw, provider, f"candidates[{i}]", required=True)
        if answers.index(candidate.get("index"), provider, f"candidates[{i}].index") == 0:
            return candidate
    return None


def gemini_completion(
    response: object, provider: str = "vertex", secrets: Iterable[str] = ()
) -> Completion:
    """The :class:`Completion` of a ``generateContent`` response (its first candidate);
    ``secrets`` (the request's key) are scrubbed from an error it quotes.

    Raises:
        UpstreamError: An ``error`` object in its place, a prompt or answer Gemini blocked
            (``upstream_bad_request``), or an answer that is malformed or not complete.
    """
    data = answers.mapping(response, provider, "the response", required=True)
    if data.get("error") is not None:
        raise gemini_error(provider, None, {}, data, secrets)
    model, ident, blocked = _head(data, provider)
    found = _Candidate()
    candidate = _first_candidate(data, provider)
    if candidate is None and not blocked:
        raise answers.malformed(provider, "candidates is empty")
    if candidate is not None:
        found.read(candidate, provider, "candidates[0]")
    usage = gemini_usage(data.get("usageMetadata"), provider)
    return found.completion(provider, model, usage, ident, blocked)


class GeminiStream(_Fold):
    """Folds the chunks of a ``streamGenerateContent?alt=sse`` response into deltas and a
    completion.

    Each chunk is a ``GenerateContentResponse`` with the next piece of the candidate; the
    last carries its ``finishReason`` and the ``usageMetadata`` (the latest one reported
    wins). There is no end event: a stream is complete once a ``finishReason`` (or a blocked
    prompt's ``promptFeedback``) arrived (:attr:`done`); one that ends before is cut.

    Args:
        provider: The name errors and the completion carry.
        max_chars: Characters of text and tool arguments the answer may reach
            (``upstream_too_large`` beyond).
        secrets: Scrubbed from an error chunk's message before it is quoted (the key).
    """

    def __init__(
        self,
        provider: str = "vertex",
        max_chars: int = answers.MAX_ANSWER_CHARS,
        secrets: Iterable[str] = (),
    ) -> None:
        super().__init__(provider, max_chars, secrets)
        self._candidate = _Candidate()
        self._usage: object = None
        self._model = ""
        self._id = ""
        self._blocked = ""

    def feed(self, chunk: object) -> str:
        """Takes one chunk; returns the text it adds.

        Raises:
            UpstreamError: An ``{"error": ...}`` chunk (Google reports a failure mid-stream
                so), or a chunk that is malformed.
        """
        p = self.provider
        data = answers.mapping(chunk, p, "a stream chunk", required=True)
        if data.get("error") is not None:
            raise gemini_error(p, None, {}, data, self.secrets)
        model, ident, blocked = _head(data, p)
        self._model, self._id = model or self._model, ident or self._id
        self._blocked = blocked or self._blocked
        if data.get("usageMetadata") is not None:
            self._usage = answers.mapping(data["usageMetadata"], p, "usageMetadata")
        candidate = _first_candidate(data, p)
        text = ""
        if candidate is not None:
            calls = len(self._candidate.calls)
            text = self._grow(self._candidate.read(candidate, p, "candidates[0]"))
            for call in self._candidate.calls[calls:]:
                self._grow(json.dumps(call.arguments))
        self.done = self._candidate.finish is not None or bool(self._blocked)
        return text

    def completion(self) -> Completion:
        """The completion of the chunks fed.

        Raises:
            UpstreamError: No ``finishReason`` arrived, Gemini blocked the prompt or answer,
                or the answer is malformed or empty.
        """
        p = self.provider
        usage = gemini_usage(self._usage, p)
        return self._candidate.completion(p, self._model, usage, self._id, self._blocked)


# --- errors --------------------------------------------------------------------------------

#: Google's error ``status`` values (and ``ErrorInfo`` reasons) that mean a bad credential.
_AUTH = {"UNAUTHENTICATED", "PERMISSION_DENIED", "API_KEY_INVALID", "API_KEY_EXPIRED"}


def gemini_error(
    provider: str,
    status: int | None,
    headers: Mapping[str, str],
    body: object,
    secrets: Iterable[str] = (),
) -> UpstreamError:
    """The :class:`UpstreamError` of a Google error: an HTTP error response (``status``, its
    ``headers``, its parsed JSON or text ``body``), or an ``{"error": ...}`` object in a 200
    answer or a stream (``status`` None: its own ``code`` says which).

    Google says a bad key with 400 ``INVALID_ARGUMENT`` and reason ``API_KEY_INVALID``: that
    is ``upstream_auth``, as 401/403 are. A 429's wait is ``retry-after``, else the
    ``RetryInfo`` detail's ``retryDelay`` (``"37s"``).
    """
    error = body.get("error") if isinstance(body, Mapping) else None
    error = error if isinstance(error, Mapping) else {}
    code = error.get("code")
    if status is None and isinstance(code, int) and not isinstance(code, bool):
        status = code if 400 <= code <= 599 else None
    google = str(error.get("status") or "")
    reasons = {google}
    wait = answers.retry_after(headers)
    details = error.get("details")
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, Mapping):
            reasons.add(str(detail.get("reason") or ""))
            delay = _DELAY.match(str(detail.get("retryDelay") or ""))
            if wait is None and delay is not None:
                wait = min(float(delay.group(1)), answers.MAX_RETRY_AFTER_S)
    if google == "RESOURCE_EXHAUSTED" and status is None:
        status = 429
    err = answers.upstream_error(provider, status, headers, body, secrets)
    kind = "upstream_auth" if reasons & _AUTH else err.code
    message = str(err)
    if status is None:  # an error object in a 200 answer, with no code of its own
        message = str(answers.stream_error(provider, body, secrets))
    if kind == "upstream_auth" and err.code != kind:
        message = message.rsplit("; hint:", 1)[0] + "; hint: check the API key"
    if google:
        message = message.replace(": ", f": {google}: ", 1)
    return UpstreamError(
        message,
        provider=provider,
        status=status,
        retry_after=wait,
        code=kind,
        reported=err.reported,
    )
