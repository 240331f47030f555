"""The one contract every bridge to a language model keeps (browser-safe: standard library only).

A *bridge* turns one :class:`ChatRequest` into one :class:`Completion` (``generate``) or a
stream of :class:`Delta` s ending with the completion (``stream``), for one upstream: Claude
through Anthropic's Messages API, GPT or any OpenAI-compatible server through Chat
Completions, or the local Evermind model. Everything above the bridges (the caching layer,
the gateway, the router, the agent) speaks only these types, so any bridge fits anywhere.

The request is provider-neutral:

- ``system`` is the *static* system prompt and ``facts`` the memory block injected per
  request. They stay separate so a provider prefix cache keeps hitting on ``system`` when
  the facts change (Anthropic: two ``cache_control`` breakpoints; OpenAI: the stable system
  message first).
- ``messages`` are the turns, oldest first; ``content`` is text, or a list of provider
  content blocks passed through untouched (tool results, images).
- ``tools`` use one neutral shape, ``{"name", "description", "input_schema"}`` (JSON
  Schema); each bridge converts it to its wire format.

Usage is measured by the upstream, never estimated: :class:`Usage` carries what the
provider reported (input, output, cache-read and cache-write tokens).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from evermind.errors import InputError

Role = Literal["user", "assistant", "tool"]
ROLES = ("user", "assistant", "tool")
#: ``max_tokens`` where a request leaves it to the upstream but the answer's size must be
#: bounded here anyway (a local model, a price estimate).
DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True)
class Message:
    """One turn of a conversation.

    Attributes:
        role: ``user``, ``assistant`` or ``tool`` (a tool's result, answering ``tool_call_id``).
        content: The text, or provider content blocks passed through as they are.
        tool_call_id: For ``role="tool"``: the id of the call this result answers.
        tool_calls: For ``role="assistant"``: the tool calls that turn made.
    """

    role: Role
    content: str | list[dict[str, Any]]
    tool_call_id: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    def text(self) -> str:
        """The turn's text: ``content`` itself, or the ``text`` of its text blocks joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(
            str(block.get("text", ""))
            for block in self.content
            if isinstance(block, dict) and block.get("type") == "text"
        )


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for: ``name`` with JSON ``arguments``."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Passthrough:
    """A client's own request, for an upstream of the same wire protocol.

    Attributes:
        protocol: ``anthropic`` or ``openai``: the wire format of ``body``.
        body: The client's JSON body, as it sent it.
        headers: The client's protocol headers the upstream must see too (Anthropic's
            ``anthropic-beta`` and ``anthropic-version``: a beta field such as
            ``context_management`` is refused without its beta header).
    """

    protocol: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatRequest:
    """One generation request, whatever the upstream.

    Attributes:
        model: The upstream's own model name (``claude-…``, ``gpt-…``, an Evermind ref).
        messages: The turns, oldest first; at least one, the last from the user or a tool.
        system: The static system prompt (cached as a prefix by providers that can).
        facts: Memory injected for this request, kept apart from ``system`` (see above).
        max_tokens: Most tokens to generate (None: the upstream's own default; the
            gateway passes a client's request on without inventing one).
        temperature: None: the upstream's default.
        stop: Stop sequences.
        tools: Tools the model may call, in the neutral shape.
        tenant: Who asks (caches and statistics are kept per tenant); not sent upstream.
        user: Which principal of the tenant asks: an opaque id of its token ("" when the
            caller has none); the cache's ``user`` scope keys on it; not sent upstream.
        extra: Provider-specific fields passed through as they are (``top_p``, ``metadata``).
        passthrough: The client's own request when it speaks the upstream's wire protocol
            (:class:`Passthrough`, set by the gateway): that protocol's bridge sends the body
            as it is, with only ``model`` and its own stream fields set, and the client's
            protocol headers, so nothing is lost in translation; the neutral fields above are
            then what the cache keys on (and ``system``/``facts`` are not added again). Other
            protocols ignore it.
    """

    model: str
    messages: tuple[Message, ...]
    system: str | None = None
    facts: str | None = None
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    tenant: str = "default"
    extra: dict[str, Any] = field(default_factory=dict)
    user: str = ""
    passthrough: Passthrough | None = None

    def __post_init__(self) -> None:
        if not self.messages:
            raise InputError("ChatRequest: messages is empty; send at least one user message")
        for i, message in enumerate(self.messages):
            if message.role not in ROLES:
                raise InputError(
                    f"ChatRequest: messages[{i}].role must be one of {ROLES}, got {message.role!r}"
                )
        if self.max_tokens is not None and (
            not isinstance(self.max_tokens, int) or self.max_tokens < 1
        ):
            raise InputError(f"ChatRequest: max_tokens must be >= 1, got {self.max_tokens!r}")
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise InputError(
                f"ChatRequest: temperature must be in [0, 2], got {self.temperature!r}"
            )

    def has_tool_results(self) -> bool:
        """Whether any turn carries a tool's result (such requests are not cached by default)."""
        return any(
            m.role == "tool"
            or (
                isinstance(m.content, list)
                and any(b.get("type") == "tool_result" for b in m.content if isinstance(b, dict))
            )
            for m in self.messages
        )


@dataclass(frozen=True)
class Usage:
    """Tokens one call used, as the upstream reported them.

    ``input_tokens`` counts uncached input only; the prompt's full size is
    ``input_tokens + cache_read_tokens + cache_write_tokens`` (Anthropic's three-way split;
    for OpenAI, ``cache_read_tokens`` is ``prompt_tokens_details.cached_tokens`` and
    ``input_tokens`` the rest).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True)
class Timing:
    """How long one call took: to the first token and in all (seconds), and its speed."""

    ttft_s: float
    total_s: float
    tokens_per_s: float


@dataclass(frozen=True)
class CacheInfo:
    """How a completion was served from the semantic cache (None on a completion: a miss).

    Attributes:
        tier: ``"l1"`` (this process) or ``"l2"`` (shared).
        score: The similarity the lookup accepted.
        cached_query: The stored query whose answer this is.
        saved: The usage the original call paid, which this hit did not.
        saved_usd: Its price (None: the model is not in the price table).
    """

    tier: str
    score: float
    cached_query: str
    saved: Usage
    saved_usd: float | None


@dataclass(frozen=True)
class Completion:
    """What one call produced.

    Attributes:
        text: The generated text.
        model: The model that answered, as the upstream names it.
        provider: ``anthropic``, ``openai`` (any OpenAI-compatible server) or ``evermind``.
        finish_reason: ``stop``, ``length``, ``tool_calls`` or ``content_filter``.
        usage: Tokens, as reported upstream (all zero on a cache hit: nothing was paid).
        tool_calls: The tool calls asked for.
        id: The upstream's id of the response.
        cost_usd: Price of ``usage`` (set by :class:`~evermind.bridges.InstrumentedBridge`).
        timing: Set by ``InstrumentedBridge``.
        cached: Set when the semantic cache served it.
        route: ``(target, reason)`` when a router chose the model (``evermind/auto``):
            target ``local`` or ``frontier``, reason as
            :class:`~evermind.agent.router.RouteDecision` names it.
        raw: The upstream's own JSON answer, as it came (keys scrubbed), when the bridge
            kept it (the SDK bridges' ``generate``): a relay in the same protocol answers
            with it, so no field is lost; never stored in the cache.
    """

    text: str
    model: str
    provider: str
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    tool_calls: tuple[ToolCall, ...] = ()
    id: str = ""
    cost_usd: float | None = None
    timing: Timing | None = None
    cached: CacheInfo | None = None
    route: tuple[str, str] | None = None
    raw: dict[str, Any] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Delta:
    """One piece of a stream: new ``text``; the last piece carries the ``completion``.

    ``usage``: what the upstream reported before the answer's end (Anthropic's
    ``message_start``: the input side), so a relay can say it as early as the provider does.
    ``event``: the upstream's own event of a content block the contract has no field for
    (Anthropic's ``thinking``), for a relay in that same protocol to pass on; others skip it.
    ``chunk``: the upstream's own Chat Completions chunk this delta came from (every field:
    its id, ``logprobs``, tool-call pieces, ``usage``), for a relay in that same protocol to
    pass on event for event; its ``text`` is the chunk's content. Others read ``text`` only.
    """

    text: str = ""
    completion: Completion | None = None
    usage: Usage | None = None
    event: dict[str, Any] | None = None
    chunk: dict[str, Any] | None = None


@runtime_checkable
class Bridge(Protocol):
    """A language model behind one wire protocol.

    ``provider`` names the protocol (``anthropic``, ``openai``, ``evermind``).
    ``last_usage`` is the usage of the most recent finished call (None before one).
    ``stream`` yields text deltas and ends with exactly one :class:`Delta` whose
    ``completion`` is set (a stream cut upstream raises :class:`~evermind.errors.UpstreamError`
    instead). Failures raise ``UpstreamError`` (or ``InputError`` for a request the bridge
    cannot express), never the SDK's own exceptions.
    """

    provider: str

    @property
    def last_usage(self) -> Usage | None: ...

    async def generate(self, request: ChatRequest) -> Completion: ...

    def stream(self, request: ChatRequest) -> AsyncIterator[Delta]: ...

    async def aclose(self) -> None: ...
