"""Gemini on the Gemini API or Vertex AI, on the official ``google-genai`` SDK (native-only).

:class:`VertexBridge` keeps the bridge contract for Gemini models; :class:`VertexEmbedder`
embeds texts with a Gemini embedding model for the memory and the cache
(:func:`evermind.memory.embedder.as_embedder` takes it as it is). Both talk through
``google.genai.Client`` (its auth, its ``x-goog-api-key`` header, retries, timeouts and
status errors), in one of its modes:

- the Gemini API (``api_key``; ``base_url`` None: ``generativelanguage.googleapis.com``):
  ``POST /v1beta/models/{model}:generateContent``;
- Vertex AI with an API key (``vertexai=True``, "express mode"): ``/v1beta1/publishers/
  google/models/{model}:…``; a ``base_url`` on ``aiplatform.googleapis.com`` picks it;
- Vertex AI with a project (``vertexai=True, project=…, location=…``; Google's application
  default credentials, or ``credentials``): ``/v1beta1/projects/{p}/locations/{l}/
  publishers/google/models/{model}:…``.

``base_url`` points any of them elsewhere (a proxy, a loopback server): the SDK keeps the
mode's paths under it. A ``base_url`` ending in an API version (``…/v1beta``) sets the
version too.

The request body is :func:`evermind.bridges.gemini_wire.gemini_body` (what the tab's
FetchBridge sends too), handed to the SDK as its typed ``contents`` and
``GenerateContentConfig`` (the SDK writes the same JSON back). ``generate`` asks the SDK for
the raw HTTP answer (``should_return_http_response``) and reads it with
:func:`~evermind.bridges.gemini_wire.gemini_completion`; ``stream`` reads each chunk the SDK
parsed, as its JSON, with :class:`~evermind.bridges.gemini_wire.GeminiStream`: every value is
checked (:mod:`evermind.bridges.answers`), and a stream that ends before a
``finishReason`` is ``upstream_stream_cut``. The SDK reads a whole answer before it hands it
over, so ``max_answer_chars`` is checked on the answer read, not while it is read (the other
SDK bridges stop reading at the limit).

Errors: every SDK failure becomes :class:`~evermind.errors.UpstreamError`
(:func:`~evermind.bridges.gemini_wire.gemini_error`): 429 → ``upstream_rate_limited`` with
``retry_after`` (the header, else Google's ``RetryInfo``), 401/403 and Google's
``API_KEY_INVALID`` → ``upstream_auth``, other 4xx → ``upstream_bad_request``, 5xx,
connection failures and timeouts → ``upstream_unavailable``; a request the SDK's types
refuse (an unknown ``extra`` field) is an :class:`~evermind.errors.InputError`. The key is
scrubbed from any upstream text an error quotes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import httpx2
import pydantic
from google import genai
from google.auth import exceptions as auth_errors
from google.genai import errors as genai_errors
from google.genai import types

from evermind.bridges import answers, gemini_wire
from evermind.bridges.base import ChatRequest, Completion, Delta, Usage
from evermind.errors import ConfigError, InputError, UpstreamError

PROVIDER = "vertex"
#: The embedding model :class:`VertexEmbedder` uses unless told.
DEFAULT_EMBEDDING_MODEL = "gemini-embedding-001"
#: Texts per ``batchEmbedContents`` call (the Gemini API takes at most 100).
EMBED_BATCH = 100
_VERSIONS = ("v1", "v1beta", "v1beta1", "v1alpha")
#: The SDK's transport errors: ``google-genai`` sends async calls through aiohttp whenever it
#: is installed (the runtime extra installs it for the OpenAI bridge), else through httpx.
_TRANSPORT_ERRORS = (
    httpx.HTTPError,
    httpx2.HTTPError,
    aiohttp.ClientError,
    auth_errors.GoogleAuthError,
)
#: What the SDK's own code raises on an answer it cannot read (a chunk's ``error`` without a
#: ``code`` is a ``TypeError`` inside it; a field of the wrong type a pydantic error, which is
#: a ``ValueError``): an upstream that does not speak the protocol, never a crash above.
_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError)


def client_for(
    api_key: str | None = None,
    base_url: str | None = None,
    *,
    max_retries: int = 2,
    timeout: float = 60.0,
    vertexai: bool | None = None,
    project: str | None = None,
    location: str | None = None,
    credentials: Any = None,
) -> genai.Client:
    """A ``google.genai.Client`` for the Gemini API or Vertex AI (see the module docstring).

    Args:
        api_key: The Gemini API key, or a Vertex AI express-mode key.
        base_url: Where requests go (None: Google's endpoint of the mode); a path ending in
            an API version sets it.
        max_retries: Retries of the SDK on 408/429/5xx and connection errors; 0: none.
        timeout: Seconds per request.
        vertexai: Vertex AI (None: when ``project`` is given or ``base_url`` is on
            ``aiplatform.googleapis.com``).
        project: The Google Cloud project (Vertex AI).
        location: Its region (Vertex AI; default ``global``).
        credentials: ``google.auth`` credentials for Vertex AI (None: the application
            default credentials, or ``api_key``).

    Raises:
        ConfigError: ``base_url`` is not an http(s) URL, or the SDK refuses the settings.
    """
    host = ""
    if base_url is not None:
        try:
            host = urlsplit(base_url).hostname or ""
        except ValueError:  # a malformed authority ("http://[::1")
            host = ""
        if not base_url.startswith(("http://", "https://")) or not host:
            raise ConfigError(f"vertex: base_url must be an http(s) URL, got {base_url!r}")
    if vertexai is None:
        vertexai = bool(project) or host.endswith("aiplatform.googleapis.com")
    options: dict[str, Any] = {
        "timeout": max(1, int(timeout * 1000)),  # the SDK's timeout is in milliseconds
        "retry_options": types.HttpRetryOptions(attempts=max_retries + 1),
    }
    if base_url:
        root, _, last = base_url.rstrip("/").rpartition("/")
        if last in _VERSIONS and "://" in root:
            base_url, options["api_version"] = root, last
        elif not vertexai:
            options["api_version"] = gemini_wire.API_VERSION
        options["base_url"] = base_url.rstrip("/") + "/"
    elif not vertexai:
        options["api_version"] = gemini_wire.API_VERSION
    try:
        return genai.Client(
            vertexai=vertexai,
            api_key=api_key or None,
            project=project,
            location=location,
            credentials=credentials,
            http_options=types.HttpOptions(**options),
        )
    except (ValueError, auth_errors.GoogleAuthError) as err:  # no key, project or credentials
        raise ConfigError(
            f"vertex: {err}; hint: pass api_key, or project and location with credentials "
            "(or application default credentials)"
        ) from err


def keys_of(api_key: str | None) -> tuple[str, ...]:
    """The keys a client may send: ``api_key``, and the ones the SDK reads from the
    environment when it has none (``GOOGLE_API_KEY``, ``GEMINI_API_KEY``): what errors scrub."""
    found = [api_key, os.environ.get("GOOGLE_API_KEY"), os.environ.get("GEMINI_API_KEY")]
    return tuple(key.strip() for key in found if key and key.strip())


class VertexBridge:
    """A :class:`~evermind.bridges.base.Bridge` to Gemini (the Gemini API or Vertex AI).

    Args:
        api_key: The Gemini API key (or a Vertex AI express-mode key); None: the SDK reads
            ``GOOGLE_API_KEY`` / ``GEMINI_API_KEY``.
        base_url: The API's base URL (None: Google's).
        max_retries: Retries of the SDK on 408/429/5xx and connection errors; 0: none.
        timeout: Seconds per request.
        client: A ready ``google.genai.Client`` (then the other connection arguments are
            unused and :meth:`aclose` leaves it open).
        max_answer_chars: The most characters of text and tool arguments an answer may hold
            (``upstream_too_large`` beyond).
        vertexai, project, location, credentials: Vertex AI (see :func:`client_for`).
    """

    provider = PROVIDER

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
        client: genai.Client | None = None,
        max_answer_chars: int = answers.MAX_ANSWER_CHARS,
        *,
        vertexai: bool | None = None,
        project: str | None = None,
        location: str | None = None,
        credentials: Any = None,
    ) -> None:
        self._owned = client is None
        self._client = client or client_for(
            api_key,
            base_url,
            max_retries=max_retries,
            timeout=timeout,
            vertexai=vertexai,
            project=project,
            location=location,
            credentials=credentials,
        )
        self.max_answer_chars = max_answer_chars
        self._last_usage: Usage | None = None
        self._keys = keys_of(api_key)

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the most recent finished call (None before one)."""
        return self._last_usage

    @property
    def _secrets(self) -> tuple[str, ...]:
        """The keys this bridge may send (scrubbed from any upstream text an error quotes)."""
        return self._keys

    async def generate(self, request: ChatRequest) -> Completion:
        """One completion of ``request``.

        Raises:
            UpstreamError: The API refused or failed, or its answer is malformed, incomplete
                or too large.
            InputError: The request has a field Gemini's types refuse.
        """
        contents, config = _typed(gemini_wire.gemini_body(request), raw=True)
        secrets = self._secrets
        try:
            response = await self._client.aio.models.generate_content(
                model=request.model, contents=contents, config=config
            )
        except (genai_errors.APIError, *_TRANSPORT_ERRORS) as err:
            raise _mapped(err, secrets) from err
        except _UNREADABLE as err:
            raise _unreadable(err, "the response", secrets) from err
        raw = response.sdk_http_response.body if response.sdk_http_response else None
        body = raw or ""
        answers.check_size(
            len(body), answers.body_limit(self.max_answer_chars), PROVIDER, "answer body"
        )
        data = answers.parse_json(body, PROVIDER, "the response", secrets)
        completion = gemini_wire.gemini_completion(data, PROVIDER, secrets)
        if isinstance(data, dict):  # kept for a relay in this same protocol
            completion = dataclasses.replace(completion, raw=data)
        answers.check_size(answers.answer_chars(completion), self.max_answer_chars, PROVIDER)
        self._last_usage = completion.usage
        return completion

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        """Text deltas of ``request``'s completion, then one delta carrying the completion.

        Raises:
            UpstreamError: The API refused or failed, the stream ended before a
                ``finishReason`` (``upstream_stream_cut``), or its answer is malformed,
                incomplete or too large.
            InputError: The request has a field Gemini's types refuse.
        """
        contents, config = _typed(gemini_wire.gemini_body(request), raw=False)
        secrets = self._secrets
        state = gemini_wire.GeminiStream(PROVIDER, self.max_answer_chars, secrets)
        chunks: Any = None
        received = False
        try:
            chunks = await self._client.aio.models.generate_content_stream(
                model=request.model, contents=contents, config=config
            )
            async for chunk in chunks:
                received = True
                data = chunk.model_dump(
                    mode="json", by_alias=True, exclude_none=True, exclude={"sdk_http_response"}
                )
                text = state.feed(data)
                yield Delta(text=text, chunk=data)
        except genai_errors.APIError as err:
            raise _mapped(err, secrets) from err
        except _TRANSPORT_ERRORS as err:
            if not received:  # no answer at all: refused, unreachable, credentials
                raise _mapped(err, secrets) from err
            raise answers.stream_cut(PROVIDER, f"{type(err).__name__}: {err}") from err
        except _UNREADABLE as err:  # a chunk the SDK cannot read
            raise _unreadable(err, "a stream chunk", secrets) from err
        finally:
            if chunks is not None:  # the SDK's generator releases the connection when closed
                await chunks.aclose()
        if not state.done:
            raise answers.stream_cut(PROVIDER, "no candidate with a finishReason")
        completion = state.completion()
        self._last_usage = completion.usage
        yield Delta(completion=completion)

    async def aclose(self) -> None:
        """Closes the SDK client's connections (unless it was passed in)."""
        if self._owned:
            await self._client.aio.aclose()


def _typed(
    body: dict[str, Any], *, raw: bool
) -> tuple[list[types.Content], types.GenerateContentConfig]:
    """The SDK's typed ``contents`` and config of a ``generateContent`` body (``raw``: ask
    for the raw HTTP answer).

    Raises:
        InputError: A field Gemini's types do not have, or a value of the wrong type.
    """
    fields = {k: v for k, v in body.items() if k != "contents"}
    fields.update(fields.pop("generationConfig", {}))
    try:
        contents = [types.Content.model_validate(c) for c in body["contents"]]
        config = types.GenerateContentConfig.model_validate(fields)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(
            f"vertex: the request's {where or 'body'} is not Gemini's: {first['msg']}; hint: "
            "extra fields go in Gemini's own (camelCase) names"
        ) from None
    if raw:
        config.should_return_http_response = True
    return contents, config


def _unreadable(err: Exception, what: str, secrets: Sequence[str]) -> UpstreamError:
    """The ``upstream_malformed`` error of an answer the SDK failed to read."""
    detail = answers.excerpt(f"{type(err).__name__}: {err}", 300, secrets)
    return answers.malformed(PROVIDER, f"the SDK could not read {what}: {detail}")


def _mapped(err: BaseException, secrets: Sequence[str]) -> UpstreamError:
    """The UpstreamError of an SDK failure."""
    if isinstance(err, genai_errors.APIError):
        response = getattr(err, "response", None)
        headers = getattr(response, "headers", None) or {}
        status = err.code if isinstance(err.code, int) and 400 <= err.code <= 599 else None
        body = err.details if isinstance(err.details, dict) else {"error": {"message": err.message}}
        return gemini_wire.gemini_error(PROVIDER, status, dict(headers), body, secrets)
    if isinstance(err, auth_errors.GoogleAuthError):  # OAuth credentials that cannot refresh
        return UpstreamError(
            f"{PROVIDER} upstream: the Google credentials failed: "
            f"{answers.excerpt(f'{type(err).__name__}: {err}', secrets=secrets)}; "
            "hint: check the credentials (gcloud auth application-default login)",
            provider=PROVIDER,
            code="upstream_auth",
        )
    timed_out = isinstance(
        err, httpx.TimeoutException | httpx2.TimeoutException | aiohttp.ServerTimeoutError
    )
    kind = "timed out" if timed_out else "failed to connect"
    return UpstreamError(
        f"{PROVIDER} upstream {kind} or dropped the connection: "
        f"{answers.excerpt(f'{type(err).__name__}: {err}', secrets=secrets)}; "
        "hint: check base_url and the network",
        provider=PROVIDER,
        code="upstream_unavailable",
    )


class VertexEmbedder:
    """Gemini embeddings (``embedContent`` / ``batchEmbedContents``) for the memory and
    the cache: ``embed(texts) -> list of vectors``, batched :data:`EMBED_BATCH` texts a call.

    Args:
        model: The embedding model (``gemini-embedding-001``, ``text-embedding-005``).
        api_key, base_url, max_retries, timeout, vertexai, project, location, credentials:
            As :func:`client_for`.
        client: A ready ``google.genai.Client`` (then :meth:`aclose` leaves it open).
        output_dimensionality: Dimensions of each vector (None: the model's own).
        task_type: Gemini's ``taskType`` (``SEMANTIC_SIMILARITY``, ``RETRIEVAL_DOCUMENT``).
        batch_size: Texts per call.

    Attributes:
        fingerprint: ``vertex:<model>[:<dims>][:<task>]``: vectors of two different
            fingerprints are never compared.
    """

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDING_MODEL,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        max_retries: int = 2,
        timeout: float = 60.0,
        client: genai.Client | None = None,
        output_dimensionality: int | None = None,
        task_type: str | None = None,
        batch_size: int = EMBED_BATCH,
        vertexai: bool | None = None,
        project: str | None = None,
        location: str | None = None,
        credentials: Any = None,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"VertexEmbedder: batch_size must be an int >= 1, got {batch_size!r}")
        if output_dimensionality is not None and (
            not isinstance(output_dimensionality, int) or output_dimensionality < 1
        ):
            raise ConfigError(
                "VertexEmbedder: output_dimensionality must be an int >= 1 or None, got "
                f"{output_dimensionality!r}"
            )
        self.model = model
        self.batch_size = batch_size
        self.output_dimensionality = output_dimensionality
        self.task_type = task_type
        self._owned = client is None
        self._client = client or client_for(
            api_key,
            base_url,
            max_retries=max_retries,
            timeout=timeout,
            vertexai=vertexai,
            project=project,
            location=location,
            credentials=credentials,
        )
        self._keys = keys_of(api_key)
        self.fingerprint = ":".join(
            str(part) for part in ("vertex", model, output_dimensionality, task_type) if part
        )
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order.

        Raises:
            InputError: ``texts`` is not a list of strings.
            UpstreamError: The API refused or failed, or answered with the wrong number of
                vectors, vectors of differing sizes, or values that are not finite numbers.
        """
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InputError("VertexEmbedder.embed: expected a list of strings")
        vectors: list[list[float]] = []
        secrets = self._keys
        config = types.EmbedContentConfig(
            output_dimensionality=self.output_dimensionality, task_type=self.task_type
        )
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                response = await self._client.aio.models.embed_content(
                    model=self.model, contents=batch, config=config
                )
            except (genai_errors.APIError, *_TRANSPORT_ERRORS) as err:
                raise _mapped(err, secrets) from err
            except _UNREADABLE as err:
                raise _unreadable(err, "the embeddings answer", secrets) from err
            self.calls += 1
            vectors += _vectors(response, len(batch))
        if vectors and len({len(v) for v in vectors}) != 1:
            raise answers.malformed(PROVIDER, "the embeddings have differing dimensions")
        return vectors

    async def aclose(self) -> None:
        """Closes the SDK client's connections (unless it was passed in)."""
        if self._owned:
            await self._client.aio.aclose()


def _vectors(response: types.EmbedContentResponse, expected: int) -> list[list[float]]:
    embeddings = response.embeddings or []
    if len(embeddings) != expected:
        raise answers.malformed(
            PROVIDER, f"{expected} texts were sent but {len(embeddings)} embeddings came back"
        )
    out = []
    for i, embedding in enumerate(embeddings):
        values = embedding.values or []
        if not values or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in values
        ):
            shown = answers.excerpt(json.dumps(values[:4]), 80)
            raise answers.malformed(
                PROVIDER, f"embeddings[{i}].values must be finite numbers, got {shown}"
            )
        out.append([float(x) for x in values])
    return out
