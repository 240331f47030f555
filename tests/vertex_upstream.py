"""A loopback Gemini upstream that speaks Google's documented REST wire format, for the
``google-genai`` SDK, the tab's ``fetch`` and the gateway to talk to, with no network::

    with GeminiUpstream() as gemini:
        genai.Client(api_key=gemini.api_key, http_options={"base_url": gemini.url})
        gemini.fail("rate_limit")               # the next request gets a 429
        gemini.requests[-1].body["contents"]    # what the last request sent

Built on :class:`tests.upstreams.Upstream` (Starlette on uvicorn in a thread, faults,
scripts, the record), answering:

- ``POST /{version}/models/{model}:generateContent`` and
  ``:streamGenerateContent?alt=sse`` (the Gemini API), the same under
  ``/{version}/publishers/google/models/`` (Vertex AI with an API key) and
  ``/{version}/projects/{p}/locations/{l}/publishers/google/models/`` (Vertex AI with a
  project: a bearer token, :attr:`GeminiUpstream.token`, instead of the key);
- ``:embedContent`` and ``:batchEmbedContents``: a deterministic unit vector per text
  (:func:`embedding_of`, ``outputDimensionality`` honoured; 8 dimensions by default).

The answer is :func:`tests.upstreams.default_reply` of the last user turn's text, cut to
``generationConfig.maxOutputTokens`` words (``finishReason`` ``MAX_TOKENS``). Tools: when the
request declares functions (``tools[].functionDeclarations``) and the last user text names
one, the model calls it (a ``functionCall`` part, ``{"query": <that text>}``, with a
``thoughtSignature`` as a thinking model signs it; ``finishReason`` ``STOP``, as Gemini ends a
call); when the last turn holds ``functionResponse`` parts, the answer is ``"Tool said:
<output>"``. A ``functionResponse`` whose ``name`` names no declared function, or a model
turn's first call part sent back without its signature, or a turn of function responses that
answers a different number of calls than the turn before it made, is Google's 400
``INVALID_ARGUMENT``.

A scripted model (``think=``, or set :attr:`~tests.upstreams.Upstream.think`), as on the other
loopbacks: ``think(conversation)`` sees the request as a :class:`tests.upstreams.Conversation`
(:func:`gemini_conversation`: the ``systemInstruction`` text; the turns, each
``functionResponse`` part a ``tool`` turn, a ``model`` turn an ``assistant`` turn with the
names of its ``functionCall`` parts; the declared functions) and returns the answer's text or
a list of ``(name, args)`` calls: one ``functionCall`` part each, in one candidate, the first
signed (Google signs only the first of parallel calls), streamed in one chunk. It replaces the
two rules above.

``usageMetadata``: ``promptTokenCount`` (system instruction and every text, as words),
``cachedContentTokenCount`` (Gemini's implicit cache, simulated: the longest prefix of
contents seen before, counted inside the prompt), ``candidatesTokenCount``,
``totalTokenCount``. A stream sends the answer a word a chunk (``data: {...}\\r\\n\\r\\n``,
each a ``GenerateContentResponse``); the last carries the ``finishReason`` and the usage.

Errors are Google's ``{"error": {"code", "message", "status", "details"}}``: a wrong key is
400 ``INVALID_ARGUMENT`` with reason ``API_KEY_INVALID`` (as the Gemini API answers it),
``fail("auth")`` 401 ``UNAUTHENTICATED``, ``rate_limit`` 429 ``RESOURCE_EXHAUSTED`` with a
``RetryInfo`` detail (``retryDelay``) and, when given, a ``retry-after`` header,
``server_error`` 500 ``INTERNAL``, ``overloaded`` 503 ``UNAVAILABLE``; ``stream_error`` sends
half a stream, then an ``{"error": ...}`` chunk.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.upstreams import Conversation, Turn, Upstream, _Fault, _pieces, count_tokens

SIGNATURE = "c2lnbmVkLWJ5LWxvb3BiYWNr"  # base64 of "signed-by-loopback"
DEFAULT_DIMENSIONS = 8
_PATH = re.compile(
    r"^/(?P<version>v1[a-z0-9]*)/(?P<scope>projects/[^/]+/locations/[^/]+/publishers/google/"
    r"|publishers/google/)?models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$"
)
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def embedding_of(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The loopback's embedding of ``text``: a unit vector drawn from its hash."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(digest[i % len(digest)] - 127.5) / 127.5 + 0.01 * i for i in range(dimensions)]
    norm = math.sqrt(sum(x * x for x in raw))
    return [x / norm for x in raw]


def _text(parts: object) -> str:
    if not isinstance(parts, list):
        return ""
    return " ".join(str(p["text"]) for p in parts if isinstance(p, dict) and "text" in p)


def _count(content: dict[str, Any], kind: str) -> int:
    """How many ``kind`` parts (``functionCall``, ``functionResponse``) a content holds."""
    return sum(1 for p in content.get("parts") or () if isinstance(p, dict) and kind in p)


def _output(response: object) -> str:
    """A ``functionResponse.response`` as text: its ``output``, else its JSON."""
    if isinstance(response, dict) and "output" in response:
        return str(response["output"])
    return json.dumps(response)


def gemini_conversation(body: dict[str, Any], tools: list[str]) -> Conversation:
    """A ``generateContent`` request as the scripted model sees it (see the module
    docstring)."""
    system = _text((body.get("systemInstruction") or {}).get("parts"))
    turns: list[Turn] = []
    for content in body.get("contents") or ():
        parts = [p for p in content.get("parts") or () if isinstance(p, dict)]
        results = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if results:
            turns += [Turn("tool", _output(r.get("response"))) for r in results]
            continue
        calls = tuple(str(p["functionCall"].get("name")) for p in parts if "functionCall" in p)
        role = "assistant" if content.get("role") == "model" else "user"
        turns.append(Turn(role, _text(parts), calls))
    return Conversation(system, tuple(turns), tuple(tools))


class GeminiUpstream(Upstream):
    """Gemini's ``generateContent`` family, as the Gemini API and Vertex AI answer it.

    Args:
        api_key: The one key it accepts (``x-goog-api-key`` or ``?key=``).
        token: The one bearer token it accepts on the Vertex AI project paths.
    """

    provider = "vertex"
    _bad_key = "API key not valid. Please pass a valid API key."

    def __init__(
        self, api_key: str = "AIza-loopback-test", *, token: str = "ya29.loopback", **kw: Any
    ) -> None:
        self.token = token
        super().__init__(api_key, **kw)

    def _routes(self) -> list[Route]:
        return [Route("/{path:path}", self._dispatch, methods=["POST"])]

    def _authorised(self, request: Request) -> bool:
        if "/projects/" in request.url.path:
            return request.headers.get("authorization") == f"Bearer {self.token}"
        given = request.headers.get("x-goog-api-key") or request.query_params.get("key")
        return given == self.api_key

    def _error(self, status: int, kind: str, message: str) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": status,
            "message": message,
            "status": _GOOGLE_STATUS.get(status, "UNKNOWN"),
        }
        if kind == "auth" and status == 400:
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }
            ]
        if status == 429:
            error["details"] = [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}
            ]
        return {"error": error}

    async def _admit(self, request: Request) -> tuple[Any, _Fault | None, Response | None]:
        body, fault, error = await super()._admit(request)
        if (
            error is not None
            and error.status_code == 401
            and not self._authorised(request)
            and "/projects/" not in request.url.path
        ):  # a wrong key: the Gemini API's 400 API_KEY_INVALID, not a 401
            return body, fault, self._json_error(400, "auth", self._bad_key)
        return body, fault, error

    def _fault_response(self, fault: _Fault) -> Response:
        if fault.kind != "rate_limit":
            return super()._fault_response(fault)
        headers = {} if fault.retry_after is None else {"retry-after": f"{fault.retry_after:g}"}
        return self._json_error(429, "rate_limit", "Resource has been exhausted.", headers)

    def _error_event(self) -> bytes:
        data = self._error(503, "overloaded", "The model is overloaded. Please try again later.")
        return f"data: {json.dumps(data)}\r\n\r\n".encode()

    def _tool_names(self, body: dict[str, Any]) -> list[str]:
        return [
            str(declared.get("name"))
            for tool in body.get("tools") or ()
            if isinstance(tool, dict)
            for declared in tool.get("functionDeclarations") or ()
            if isinstance(declared, dict)
        ]

    async def _dispatch(self, request: Request) -> Response:
        match = _PATH.match(request.url.path)
        if match is None:
            await request.body()
            return self._json_error(404, "bad", f"Method not found: {request.url.path}")
        method = match["method"]
        if method in ("embedContent", "batchEmbedContents"):
            return await self._embed(request, method)
        if method not in ("generateContent", "streamGenerateContent"):
            await request.body()
            return self._json_error(404, "bad", f"Method not found: {method}")
        stream = method == "streamGenerateContent"
        if stream and request.query_params.get("alt") != "sse":
            await request.body()
            return self._json_error(400, "bad", "this loopback streams only with alt=sse")
        return await self._generate(request, match["model"], stream)

    async def _generate(self, request: Request, model: str, stream: bool) -> Response:
        body, fault, error = await self._admit(request)
        if error is not None:
            return error
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return self._json_error(400, "bad", "* GenerateContentRequest.contents: required")
        refused = self._check_turns(body, contents)
        if refused is not None:
            return self._json_error(400, "bad", refused)
        last = contents[-1] if isinstance(contents[-1], dict) else {}
        parts = [p for p in last.get("parts") or () if isinstance(p, dict)]
        results = [p["functionResponse"] for p in parts if "functionResponse" in p]
        config = body.get("generationConfig") or {}
        limit = int(config.get("maxOutputTokens") or 1 << 30)
        calls: list[dict[str, Any]] = []
        if self.think is not None:
            said = self.think(gemini_conversation(body, self._tool_names(body)))
            if isinstance(said, list):
                calls = [{"name": str(n), "args": dict(a)} for n, a in said]
            words = _pieces(said) if isinstance(said, str) else []
        elif results:
            said = " ".join(_output(r.get("response", {})) for r in results)
            words = _pieces(f"Tool said: {said}")
        else:
            text = _text(last.get("parts"))
            named = [n for n in self._tool_names(body) if n in text]
            if named:
                calls = [{"name": named[0], "args": {"query": text}}]
            words = _pieces(self.reply(text))
        words, truncated = words[:limit], len(words) > limit
        system = _text((body.get("systemInstruction") or {}).get("parts"))
        prompt = count_tokens(system) + sum(
            count_tokens(_text(c.get("parts")) or json.dumps(c.get("parts")))
            for c in contents
            if isinstance(c, dict)
        )
        cached = min(self._prefix_cached(system, contents), prompt)
        output = (
            sum(count_tokens(json.dumps(c["args"])) for c in calls)
            if calls
            else count_tokens("".join(words))
        )
        usage = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt + output,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        }
        if cached:
            usage["cachedContentTokenCount"] = cached
        with self._lock:
            ident = f"loopback-{self._served:06d}"
        head = {"modelVersion": model, "responseId": ident}
        finish = "MAX_TOKENS" if truncated and not calls else "STOP"
        if calls:  # Google signs the first of parallel calls only
            final_parts: list[dict[str, Any]] = [
                {"functionCall": c, **({"thoughtSignature": SIGNATURE} if not i else {})}
                for i, c in enumerate(calls)
            ]
        else:
            final_parts = [{"text": "".join(words).strip()}]
        if not stream:
            payload = {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": final_parts},
                        "finishReason": finish,
                        "index": 0,
                    }
                ],
                "usageMetadata": usage,
                **head,
            }
            return self._body_response(payload, fault)
        chunks = self._chunks(head, final_parts if calls else None, words, finish, usage)
        return StreamingResponse(self._paced(chunks, fault), media_type="text/event-stream")

    def _check_turns(self, body: dict[str, Any], contents: list[Any]) -> str | None:
        """Google's refusal of a conversation it cannot take (None: it can)."""
        declared = set(self._tool_names(body))
        for i, content in enumerate(contents):
            if not isinstance(content, dict) or content.get("role") not in ("user", "model"):
                return f"* GenerateContentRequest.contents[{i}].role: must be user or model"
            calls = _count(content, "functionCall")
            following = contents[i + 1] if i + 1 < len(contents) else None
            answered = _count(following, "functionResponse") if isinstance(following, dict) else 0
            if calls and answered and answered != calls:
                return (
                    "Please ensure that the number of function response parts is equal to "
                    "the number of function call parts of the function call turn."
                )
            first_call = True
            for j, part in enumerate(content.get("parts") or ()):
                if not isinstance(part, dict):
                    continue
                if "functionCall" in part and first_call:
                    first_call = False
                    if part.get("thoughtSignature") == SIGNATURE:
                        continue
                    return (
                        f"Function call is missing a thought_signature in functionCall parts. "
                        f"contents[{i}].parts[{j}]"
                    )
                response = part.get("functionResponse")
                if isinstance(response, dict) and response.get("name") not in declared:
                    return f"* contents[{i}].parts[{j}].function_response.name: unknown function"
        return None

    def _prefix_cached(self, system: str, contents: list[Any]) -> int:
        """Tokens of the longest prefix (system instruction, then whole contents) seen before;
        every prefix of this request is remembered."""
        digest = hashlib.sha256(system.encode())
        total, cached, keys = count_tokens(system), 0, []
        for content in contents:
            digest.update(json.dumps(content, sort_keys=True).encode())
            key = digest.copy().hexdigest()
            with self._lock:
                if key in self._cache:
                    cached = total + count_tokens(_text(content.get("parts")))
            total += count_tokens(_text(content.get("parts")))
            keys.append(key)
        with self._lock:
            self._cache.update(keys)
        return cached

    @staticmethod
    def _chunks(
        head: dict[str, Any],
        call_parts: list[dict[str, Any]] | None,
        words: list[str],
        finish: str,
        usage: dict[str, Any],
    ) -> list[bytes]:
        pieces: list[list[dict[str, Any]]] = (
            [call_parts] if call_parts is not None else [[{"text": w}] for w in words] or [[]]
        )
        early = {"promptTokenCount": usage["promptTokenCount"]}
        out = []
        for i, parts in enumerate(pieces):
            final = i == len(pieces) - 1
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            if final:
                candidate["finishReason"] = finish
            chunk = {"candidates": [candidate], "usageMetadata": usage if final else early, **head}
            out.append(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        return out

    async def _embed(self, request: Request, method: str) -> Response:
        body, _, error = await self._admit(request)
        if error is not None:
            return error
        requests = body.get("requests") if method == "batchEmbedContents" else [body]
        if not isinstance(requests, list) or not requests:
            return self._json_error(400, "bad", "* BatchEmbedContentsRequest.requests: empty")
        embeddings = []
        for i, item in enumerate(requests):
            content = item.get("content") if isinstance(item, dict) else None
            if not isinstance(content, dict):
                return self._json_error(400, "bad", f"* requests[{i}].content: required")
            dimensions = int(item.get("outputDimensionality") or DEFAULT_DIMENSIONS)
            embeddings.append({"values": embedding_of(_text(content.get("parts")), dimensions)})
        if method == "embedContent":
            return JSONResponse({"embedding": embeddings[0]})
        return JSONResponse({"embeddings": embeddings})
