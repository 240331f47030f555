"""Request bodies of the runtime's JSON endpoints, as pydantic models (native-only).

They validate types and ranges and become the OpenAPI schema at ``/docs``. Unknown fields
are accepted and ignored (OpenAI clients send many); limits that depend on the server's
configuration (``max_tokens`` cap, input sizes) are checked by the routes.

Types are strict, as the OpenAI API documents them: ``"max_tokens": "10"`` or
``"stream": "yes"`` is refused, not coerced. Before any field is read, the whole body is
checked by :func:`evermind.memory.records.check_json`: no string (field, key, nested value)
may hold a lone UTF-16 surrogate, and nothing may nest deeper than ``MAX_JSON_DEPTH`` — a
value that could be stored but not read back (a 300-deep ``meta``) is refused before it is
written.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evermind.cache.verified import DEFAULT_MAX_ERROR, parse_max_error
from evermind.errors import ConfigError
from evermind.memory.records import MAX_QUERY_CHARS, check_json

Stop = str | list[str] | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _well_formed(cls, data: Any) -> Any:
        try:
            check_json(data, "body")
        except ConfigError as err:
            raise ValueError(str(err)) from None
        return data


class StreamOptions(_Body):
    """``stream_options``: ``include_usage`` adds a final chunk with the token counts."""

    include_usage: bool = False


class _Sampling(_Body):
    model: str = Field(description="evermind/<name>:<version>, or evermind/<name> for the newest")
    max_tokens: int | None = Field(None, ge=1, description="Tokens to generate at most")
    temperature: float | None = Field(None, ge=0, le=2, description="0 is greedy; default 1")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling mass")
    top_k: int | None = Field(None, ge=1, description="Evermind extension: top-k sampling")
    stop: Stop = Field(None, description="Up to 4 strings that end the generation")
    seed: int | None = Field(None, description="Same seed, same request: same text")
    n: int | None = Field(None, ge=1, le=1, description="Only 1 is supported")
    stream: bool = False
    stream_options: StreamOptions | None = None


class CompletionRequest(_Sampling):
    """``POST /v1/completions``."""

    prompt: str | list[str] = Field(description="The text to continue (one prompt)")


class ContentPart(_Body):
    """One part of a message's content; only ``text`` parts are supported."""

    type: str
    text: str | None = None


class ChatMessage(_Body):
    """One chat turn."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = Field(None, description="role tool: the call this answers")
    tool_calls: list[dict[str, Any]] | None = Field(None, description="role assistant")


class EvermindOptions(_Body):
    """``evermind``: Evermind extensions of a chat request."""

    affect: bool = Field(
        False,
        description="Add evermind.affect: the affect head's scores of the reply and the "
        "last user message (models with an affect head; not with stream)",
    )


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    evermind: EvermindOptions | None = None
    max_completion_tokens: int | None = Field(None, ge=1, description="Alias of max_tokens")
    tools: list[dict[str, Any]] | None = Field(
        None, description="Gateway upstreams only (OpenAI function tools); local models ignore it"
    )


class AnthropicMessage(_Body):
    """One turn of a Messages request: text, or content blocks (``system`` turns, which
    Claude Code sends among the messages, count as system prompt text)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class MessagesRequest(_Body):
    """``POST /v1/messages`` (Anthropic Messages shape; gateway models only)."""

    model: str = Field(description="<upstream>/<name>, an upstream of the --upstreams file")
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None


class CountTokensRequest(_Body):
    """``POST /v1/messages/count_tokens``: read for its model; the body goes upstream as sent."""

    model: str = Field(description="<upstream>/<name>, or a bare id of the default upstream")
    messages: list[AnthropicMessage] = Field(min_length=1)


class EmbeddingRequest(_Body):
    """``POST /v1/embeddings``."""

    model: str
    input: str | list[str] = Field(description="A text or a list of texts")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, description="Must equal the model's d_model")


class AffectRequest(_Body):
    """``POST /v1/affect``."""

    model: str = Field(description="evermind/<name>:<version> of a package with an affect head")
    input: str | list[str] = Field(description="A text or a list of texts")


class CacheLookupRequest(_Body):
    """``POST /v1/semantic-cache/lookup``."""

    embedding: list[float] = Field(min_length=1, max_length=16384)
    threshold: float = Field(0.9, ge=-1, le=1, description="Smallest cosine that is a hit")
    namespace: str | None = Field(None, max_length=256)
    query: str | None = Field(
        None, max_length=100_000, description="The question: a hit is verified against it"
    )
    max_error: float | str = Field(
        DEFAULT_MAX_ERROR,
        description="δ, the share of lookups that may be answered wrongly (a rate in (0, 1)), "
        "or 'off' for the rule-based decision",
    )

    @model_validator(mode="after")
    def _rate(self) -> CacheLookupRequest:
        try:
            parse_max_error(self.max_error, "max_error")
        except ConfigError as err:
            raise ValueError(str(err)) from None
        return self

    @property
    def bound(self) -> float | None:
        """The δ to judge with (None: the rule-based decision)."""
        return parse_max_error(self.max_error, "max_error")


class CacheStoreRequest(_Body):
    """``POST /v1/semantic-cache/store``."""

    embedding: list[float] = Field(min_length=1, max_length=16384)
    response: Any = Field(description="Any JSON value: returned as-is on a hit")
    namespace: str | None = Field(None, max_length=256)
    meta: dict[str, Any] | None = None
    query: str | None = Field(None, max_length=100_000)


class GatewayCacheLookup(_Body):
    """``POST /v1/gateway/cache/lookup``: the question and the scope of the agent request
    it stands for (the OpenAI chat body an agent sends: model, optional system prompt,
    temperature, max_tokens), judged by the gateway's own cache."""

    model: str = Field(min_length=1, max_length=256, description="A gateway model id")
    query: str = Field(min_length=1, max_length=100_000, description="The user's question")
    system: str | None = Field(None, max_length=100_000)
    temperature: float | None = Field(0.0, ge=0, le=2, description="0: cacheable")
    max_tokens: int | None = Field(None, ge=1)


class GatewayCacheStore(GatewayCacheLookup):
    """``POST /v1/gateway/cache/store``: the answer to serve for that question and scope."""

    response: str = Field(min_length=1, max_length=1_000_000, description="The answer text")


class _MemoryScope(_Body):
    namespace: str | None = Field(None, max_length=256, description="Default: 'default'")
    model: str | None = Field(
        None, description="Embedder for semantic recall (one of your models); none: lexical only"
    )


class RememberRequest(_MemoryScope):
    """``POST /v1/memory/remember``."""

    key: str
    content: str
    tags: list[str] = Field(default_factory=list)
    importance: float = Field(0.5, ge=0, le=1)
    ttl: float | None = Field(None, gt=0, description="Lifetime in seconds")
    meta: dict[str, Any] | None = None
    aliases: list[str] = Field(
        default_factory=list,
        description="Other keys naming the same subject; a memory under one is superseded",
    )
    mode: Literal["reconcile", "put"] = Field(
        "reconcile",
        description="reconcile: write-through cognition (confirm, supersede with history, "
        "contested, reject); put: plain overwrite by key",
    )


class RetrieveRequest(_MemoryScope):
    """``POST /v1/retrieve``: cited passages of the ingested documents for a question."""

    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    top_k: int = Field(5, ge=1, le=50)
    where: dict[str, Any] | None = Field(
        None,
        description='Only rows whose fields this filter admits, in the JSON form: {"eq": '
        '["status", "open"]}, {"in": [field, [values]]}, {"range": [field, {"gte": 1}]}, '
        '{"exists": field}, {"and": [...]}, {"or": [...]}, {"not": filter}',
    )


class AnswerRequest(RetrieveRequest):
    """``POST /v1/answer``: a model's answer from the ingested passages, citing them."""

    answer_with: str = Field(
        min_length=1,
        max_length=256,
        description="The model that answers: an upstream model of the gateway "
        "(openai/…, anthropic/…, or a bare id the default upstream serves)",
    )
    max_tokens: int = Field(512, ge=1, le=8192)


class RecallRequest(_MemoryScope):
    """``POST /v1/memory/recall``."""

    query: str = Field(max_length=MAX_QUERY_CHARS)
    top_k: int = Field(5, ge=1, le=100)
    tags: list[str] | None = None
