"""CachingBridge: the policy (what is cacheable), the key (what must match), TTL, streams, stats.

The upstream is a scripted fake bridge that counts its calls; the cache is a real
:class:`SemanticCache` with the model-free :class:`TermEmbedder`, so every hit or miss is
the cache's own decision.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from evermind.bridges import Bridge, ChatRequest, Completion, Delta, Message, Usage
from evermind.bridges.caching import CachePolicy, CachingBridge, TermEmbedder
from evermind.cache import SemanticCache
from evermind.errors import ConfigError, UpstreamError

QUESTION = "What is the capital of France?"
PARAPHRASE = "Tell me the capital of France, please."
NEAR_MISS = "What is the capital of Germany?"
USAGE = Usage(input_tokens=120, output_tokens=30, cache_read_tokens=10, cache_write_tokens=5)


class FakeBridge:
    """Answers every request with a numbered text; can cut its stream halfway."""

    provider = "openai"

    def __init__(self, cost: float | None = 0.25) -> None:
        self.requests: list[ChatRequest] = []
        self.cost = cost
        self.cut = False
        self._last: Usage | None = None

    @property
    def last_usage(self) -> Usage | None:
        return self._last

    def _answer(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        self._last = USAGE
        text = f"answer {len(self.requests)} to {request.messages[-1].text()}"
        return Completion(text, request.model, "openai", usage=USAGE, cost_usd=self.cost)

    async def generate(self, request: ChatRequest) -> Completion:
        return self._answer(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        completion = self._answer(request)
        half = len(completion.text) // 2
        yield Delta(completion.text[:half])
        if self.cut:
            raise UpstreamError("cut", provider="openai", code="upstream_stream_cut")
        yield Delta(completion.text[half:])
        yield Delta(completion=completion)

    async def aclose(self) -> None:
        pass


def ask(text: str, **fields: Any) -> ChatRequest:
    options: dict[str, Any] = {"model": "gpt-test", "temperature": 0.0}
    options.update(fields)
    return ChatRequest(messages=(Message("user", text),), **options)


def make(policy: CachePolicy | None = None, **kwargs: Any) -> tuple[CachingBridge, FakeBridge]:
    upstream = FakeBridge()
    # The rule-based decision: these tests are about the bridge (keys, scopes, streams,
    # counters) and need a paraphrase hit from the small terms embedder; the verified decision
    # through the bridge is tested in test_cache_verified.py and tests/runtime.
    cache = SemanticCache(TermEmbedder(), max_error=None)
    return CachingBridge(upstream, cache, policy, **kwargs), upstream


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def twice(
    bridge: CachingBridge, first: ChatRequest, second: ChatRequest | None = None
) -> Completion:
    """Sends ``first``, then ``second`` (default: ``first`` again); returns the second answer."""

    async def scenario() -> Completion:
        await bridge.generate(first)
        return await bridge.generate(second or first)

    result: Completion = run(scenario())
    return result


def test_it_is_a_bridge() -> None:
    bridge, _ = make()
    assert isinstance(bridge, Bridge)
    assert bridge.provider == "openai"


def test_a_paraphrase_is_served_with_what_it_saved_and_a_near_miss_is_not() -> None:
    bridge, upstream = make()

    async def scenario() -> tuple[Completion, Completion, Completion]:
        first = await bridge.generate(ask(QUESTION))
        again = await bridge.generate(ask(PARAPHRASE))
        other = await bridge.generate(ask(NEAR_MISS))
        return first, again, other

    first, again, other = run(scenario())
    assert first.cached is None and len(upstream.requests) == 2
    assert again.text == first.text and again.cached is not None
    assert again.cached.tier == "l1" and again.cached.cached_query == QUESTION
    assert 0 < again.cached.score <= 1
    assert again.cached.saved == USAGE and again.cached.saved_usd == 0.25
    assert again.usage == Usage() and again.cost_usd == 0.0
    assert other.cached is None and "Germany" in other.text


def test_saved_usd_falls_back_to_the_price_function() -> None:
    bridge, upstream = make(price=lambda model, usage: 0.001 * usage.output_tokens)
    upstream.cost = None

    async def scenario() -> Completion:
        await bridge.generate(ask(QUESTION))
        return await bridge.generate(ask(QUESTION))

    hit = run(scenario())
    assert hit.cached is not None and hit.cached.saved_usd == pytest.approx(0.03)


@pytest.mark.parametrize(
    ("fields", "policy", "reason"),
    [
        ({"temperature": 0.7}, CachePolicy(), "temperature"),
        ({"temperature": None}, CachePolicy(), "temperature"),
        ({"temperature": 0.7, "extra": {"cache": False}}, CachePolicy(), "temperature"),
        ({"extra": {"cache": False}}, CachePolicy(), "opt_out"),
        ({"tools": ({"name": "f", "description": "", "input_schema": {}},)}, None, "tools"),
    ],
)
def test_requests_the_policy_refuses_always_go_upstream(
    fields: dict[str, Any], policy: CachePolicy | None, reason: str
) -> None:
    bridge, upstream = make(policy)

    async def scenario() -> None:
        for _ in range(2):
            assert (await bridge.generate(ask(QUESTION, **fields))).cached is None

    run(scenario())
    assert len(upstream.requests) == 2
    expected = "opt_out" if fields.get("extra") == {"cache": False} else reason
    assert bridge.stats.misses == {expected: 2} and bridge.stats.stores == 0


def test_opt_ins_cache_what_the_default_policy_refuses() -> None:
    tools = ({"name": "f", "description": "", "input_schema": {}},)
    cases: list[tuple[dict[str, Any], CachePolicy]] = [
        ({"temperature": 0.9, "extra": {"cache": True}}, CachePolicy()),
        ({"temperature": None}, CachePolicy(cache_default_temperature=True)),
        ({"tools": tools}, CachePolicy(cache_tools=True)),
    ]
    for fields, policy in cases:
        bridge, upstream = make(policy)
        assert twice(bridge, ask(QUESTION, **fields)).cached is not None, fields
        assert len(upstream.requests) == 1
        assert "cache" not in upstream.requests[0].extra  # the opt-in is never sent upstream


def test_tool_results_are_cached_only_when_the_policy_says() -> None:
    turns = (
        Message("user", "What is the weather in Paris?"),
        Message("assistant", "", tool_calls=()),
        Message("tool", "sunny, 21 C", tool_call_id="call-1"),
    )
    request = ChatRequest(model="gpt-test", messages=turns, temperature=0.0)
    for policy, calls in ((CachePolicy(), 2), (CachePolicy(cache_tool_results=True), 1)):
        bridge, upstream = make(policy)
        twice(bridge, request)
        assert len(upstream.requests) == calls
        if calls == 2:
            assert bridge.stats.misses == {"tool_results": 2}


def test_model_system_facts_turns_and_tenant_must_match_exactly() -> None:
    variants = [
        {"model": "gpt-other"},
        {"system": "You answer in French."},
        {"facts": "The user lives in Lyon."},
        {"max_tokens": 7},
        {"tenant": "bravo"},
        {
            "messages": (
                Message("user", "Hi"),
                Message("assistant", "Hello"),
                Message("user", PARAPHRASE),
            )
        },
    ]
    for fields in variants:
        bridge, upstream = make()
        assert twice(bridge, ask(QUESTION), replace(ask(PARAPHRASE), **fields)).cached is None
        assert twice(bridge, ask(QUESTION), ask(PARAPHRASE)).cached is not None  # the control
        assert len(upstream.requests) == 2, fields


def test_tenants_share_entries_only_when_the_policy_groups_them() -> None:
    bridge, upstream = make(CachePolicy(shared={"alpha": "team", "bravo": "team"}))

    async def scenario() -> list[Completion]:
        await bridge.generate(ask(QUESTION, tenant="alpha"))
        return [await bridge.generate(ask(PARAPHRASE, tenant=t)) for t in ("bravo", "carol")]

    bravo, carol = run(scenario())
    assert bravo.cached is not None and carol.cached is None
    assert len(upstream.requests) == 2


def test_ttl_is_per_cache_namespace() -> None:
    now = [1000.0]
    policy = CachePolicy(
        ttl=60, ttls={"short": 5, "forever": None}, shared={"s": "short", "f": "forever"}
    )
    bridge, _ = make(policy, clock=lambda: now[0])

    async def scenario() -> dict[str, bool]:
        for tenant in ("default", "s", "f"):
            await bridge.generate(ask(QUESTION, tenant=tenant))
        now[0] += 30  # past "short"'s 5 s, within the default 60 s
        served = {
            t: (await bridge.generate(ask(QUESTION, tenant=t))).cached is not None
            for t in ("default", "s", "f")
        }
        now[0] += 1e6
        served["default_later"] = (await bridge.generate(ask(QUESTION))).cached is not None
        served["f_later"] = (await bridge.generate(ask(QUESTION, tenant="f"))).cached is not None
        return served

    served = run(scenario())
    assert served == {
        "default": True,
        "s": False,
        "f": True,
        "default_later": False,
        "f_later": True,
    }
    assert bridge.stats.misses["expired"] == 2


def test_invalid_ttl_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        CachePolicy(ttl=0)
    with pytest.raises(ConfigError):
        CachePolicy(ttls={"x": -1})


async def _collect(stream: AsyncIterator[Delta]) -> tuple[str, Completion | None]:
    text, completion = [], None
    async for delta in stream:
        text.append(delta.text)
        if delta.completion is not None:
            completion = delta.completion
    return "".join(text), completion


def test_streams_miss_then_hit() -> None:
    bridge, upstream = make()

    async def scenario() -> tuple[tuple[str, Completion | None], tuple[str, Completion | None]]:
        miss = await _collect(bridge.stream(ask(QUESTION)))
        hit = await _collect(bridge.stream(ask(PARAPHRASE)))
        return miss, hit

    (miss_text, miss), (hit_text, hit) = run(scenario())
    assert miss is not None and miss.cached is None and miss_text == miss.text
    assert hit is not None and hit.cached is not None and hit_text == miss.text == hit.text
    assert len(upstream.requests) == 1 and bridge.stats.stores == 1


def test_a_failed_or_abandoned_stream_is_not_stored() -> None:
    bridge, upstream = make()
    upstream.cut = True

    async def cut() -> None:
        with pytest.raises(UpstreamError):
            await _collect(bridge.stream(ask(QUESTION)))

    async def abandoned() -> None:
        upstream.cut = False
        stream = bridge.stream(ask(QUESTION))
        async for _ in stream:
            break
        await stream.aclose()  # type: ignore[attr-defined]

    run(cut())
    run(abandoned())
    assert bridge.stats.stores == 0 and len(bridge.cache) == 0
    hit = run(bridge.generate(ask(QUESTION)))
    assert hit.cached is None and len(upstream.requests) == 3


def test_stats_count_hits_misses_and_savings() -> None:
    bridge, _ = make()

    async def scenario() -> None:
        await bridge.generate(ask(QUESTION))  # miss (lookup), stored
        await bridge.generate(ask(PARAPHRASE))  # hit
        await bridge.generate(ask(QUESTION))  # hit
        await bridge.generate(ask(NEAR_MISS))  # miss (lookup)
        await bridge.generate(ask(QUESTION, temperature=1.0))  # miss (temperature)

    run(scenario())
    stats = bridge.stats
    assert (stats.requests, stats.hits_l1, stats.hits_l2, stats.stores) == (5, 2, 0, 2)
    assert stats.misses == {"lookup": 2, "temperature": 1}
    assert stats.hit_rate == pytest.approx(0.4)
    assert stats.saved == USAGE + USAGE and stats.saved_usd == pytest.approx(0.5)


def test_the_cache_breaking_never_fails_the_request() -> None:
    upstream = FakeBridge()

    def broken(text: str) -> list[float]:
        return [0.0, 0.0]  # a zero vector: the cache refuses it (ShapeError)

    bridge = CachingBridge(upstream, SemanticCache(broken, fingerprint="broken"))
    answer = run(bridge.generate(ask(QUESTION)))
    assert answer.cached is None and bridge.stats.misses == {"cache_error": 1}


def test_term_embedder_is_deterministic_and_named() -> None:
    embed = TermEmbedder(64)
    assert embed(QUESTION) == embed(QUESTION) and len(embed(QUESTION)) == 64
    assert any(embed("the")) and embed.fingerprint.endswith(":64")
    with pytest.raises(ConfigError):
        TermEmbedder(2)


def test_open_says_hit_miss_or_bypass_before_anything_is_served() -> None:
    bridge, upstream = make()

    async def scenario() -> list[str]:
        statuses = []
        for request in (ask(QUESTION), ask(PARAPHRASE), ask(QUESTION, temperature=1.0)):
            outcome = await bridge.open(request)
            statuses.append(f"{outcome.status}:{outcome.reason}")
            await bridge.complete(outcome)
        return statuses

    assert run(scenario()) == ["miss:lookup", "hit-l1:hit", "bypass:temperature"]
    near = run(bridge.open(ask(NEAR_MISS)))
    # refused, and the detail says why in the words that differ (rule 4b names them)
    assert near.status == "miss" and "germany" in near.detail.lower()
    assert len(upstream.requests) == 2


def test_a_stream_is_stored_when_its_completion_arrives_even_if_the_reader_stops_there() -> None:
    bridge, upstream = make()

    async def scenario() -> None:
        stream = bridge.stream(ask(QUESTION))
        async for delta in stream:
            if delta.completion is not None:
                break
        await stream.aclose()  # type: ignore[attr-defined]

    run(scenario())
    assert bridge.stats.stores == 1
    assert run(bridge.generate(ask(PARAPHRASE))).cached is not None
    assert len(upstream.requests) == 1


def test_one_question_stored_in_many_scopes_does_not_blind_the_calibration() -> None:
    """The calibration measures unrelated stored queries; the same question asked under ten
    system prompts is one query, not ten texts that score 1.0 with each other."""
    bridge, _ = make()
    questions = [
        "How do I parse JSON in Go?",
        "Which port does PostgreSQL listen on?",
        "How do I undo the last git commit?",
        "What does chmod 755 mean?",
        "How to center a div with flexbox",
        "How do I list open ports on Linux?",
        "What is a Kubernetes liveness probe?",
        "How do I set an environment variable in Windows?",
    ]

    async def scenario() -> Completion:
        for question in questions:
            await bridge.generate(ask(question))
        for i in range(10):
            await bridge.generate(ask(QUESTION, system=f"Persona {i}"))
        return await bridge.generate(ask(PARAPHRASE, system="Persona 3"))

    hit = run(scenario())
    assert not bridge.cache.calibration.collapsed
    assert hit.cached is not None and hit.cached.cached_query == QUESTION
