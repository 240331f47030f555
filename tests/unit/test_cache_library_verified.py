"""The library's cache checks its would-be hits as the gateway does (issue 34, item 4).

``SemanticCache.get_or_generate`` holds the caller's ``generate``: a verification signal. Until
the cache's own checks bound the error of serving a would-be hit unchecked, every would-be hit
that is not an exact repeat calls ``generate`` too and is served only when the two answers
agree; a lookup without a signal (``lookup``) falls back to a stricter bound and says so.
"""

from __future__ import annotations

import asyncio
import random
import zlib

import pytest
from evals import cache_corpus

from evermind.bridges.caching import TermEmbedder
from evermind.cache import SemanticCache
from evermind.cache.verified import (
    FALLBACK_SHARE,
    MIN_HIT_CHECKS,
    CheckPlan,
    Verification,
    answer_text,
    fallback_threshold,
    plan_check,
    record_check,
)
from evermind.cache.verifier import default_verifier
from evermind.errors import ConfigError
from evermind.search.matrix import MatrixIndex

#: Unrelated questions (the calibration needs 8 or more) and, per question, a rewording the
#: shipped verifier judges the same question at δ = 0.01 with the word-hash embedder below.
TOPICS = [
    "How do I reset my router password",
    "Convert 10 kilometres to miles",
    "Who painted the Mona Lisa?",
    "How to undo the last git commit but keep the changes",
    "Best soil for growing tomatoes in pots",
    "What does a 502 Bad Gateway error mean?",
    "How long should I rest bread dough?",
    "Explain compound interest simply",
    "What is the capital of France?",
]
QUESTION = "What is the capital of France?"
REWORDED = "what is the capital city of France?"


def _embed(text: str) -> list[float]:
    vector = [0.0] * 64
    for word in text.lower().replace("?", "").split():
        vector[zlib.crc32(word.encode()) % 64] += 1.0
    return vector


def _cache(**options: object) -> SemanticCache:
    cache = SemanticCache(_embed, **options)  # type: ignore[arg-type]
    for i, text in enumerate(TOPICS):
        cache.store(text, f"answer {i}")
    return cache


class Upstream:
    """A ``generate`` that answers ``answer`` and counts its calls."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls: list[str] = []

    def __call__(self, query: str) -> str:
        self.calls.append(query)
        return self.answer


def test_a_fresh_caches_paraphrase_hit_calls_generate_and_serves_the_agreeing_answer() -> None:
    cache = _cache()
    assert isinstance(cache.verification, Verification)  # the default for max_error
    upstream = Upstream("answer 8")
    got = cache.get_or_generate(REWORDED, upstream)
    assert upstream.calls == [REWORDED]  # forced check: the bound is not reached yet
    assert got.lookup.hit and got.checked and got.forced and got.generated
    assert got.response == "answer 8"
    assert "same answer" in got.reason
    assert cache.verification is not None and cache.verification.forced == 1
    # An exact repeat is never checked (it cannot be wrong): served without generate.
    again = cache.get_or_generate(QUESTION, upstream)
    assert again.lookup.hit and not again.generated and len(upstream.calls) == 1


def test_a_wrong_cached_answer_is_never_served_and_not_served_twice() -> None:
    cache = _cache()
    upstream = Upstream("Paris is the capital of France, and it has been since 987.")
    got = cache.get_or_generate(REWORDED, upstream)
    assert got.response == upstream.answer  # the check disagreed: generate's answer
    assert not got.lookup.hit and got.lookup.refused_by == "verify_mismatch"
    assert got.checked and got.forced
    assert "differs" in got.reason
    checks = cache.verification
    assert checks is not None and checks.mismatches == 1
    entry = got.lookup.entry
    assert entry is not None and checks.contested(entry) is not None  # marked
    # The fresh answer was stored for this question: an exact repeat serves it.
    assert cache.lookup(REWORDED).response == upstream.answer
    # Without that new entry, the same question meets the wrong entry again: refused.
    assert cache.invalidate(query=REWORDED) == 1
    calls = len(upstream.calls)
    second = cache.get_or_generate(REWORDED, upstream)
    assert second.lookup.refused_by == "contested", second.lookup.reason
    assert second.response == upstream.answer and len(upstream.calls) == calls + 1
    assert cache.stats.hits == 1  # the exact repeat only: the wrong answer never counted


def test_aget_or_generate_checks_the_same_way() -> None:
    async def scenario() -> None:
        cache = _cache()
        calls: list[str] = []

        async def agree(query: str) -> str:
            calls.append(query)
            return "answer 8"

        async def disagree(query: str) -> str:
            calls.append(query)
            return "Lyon"

        got = await cache.aget_or_generate(REWORDED, agree)
        assert got.lookup.hit and got.checked and got.forced and calls == [REWORDED]
        wrong = _cache()
        missed = await wrong.aget_or_generate(REWORDED, disagree)
        assert missed.response == "Lyon" and missed.lookup.refused_by == "verify_mismatch"
        assert (await wrong.alookup(REWORDED)).response == "Lyon"
        assert (await cache.alookup(REWORDED)).refused_by is not None  # no signal: refused

    asyncio.run(scenario())


def test_after_enough_agreeing_checks_hits_are_served_without_generate() -> None:
    """δ = 0.05, no random sample: the forced checks alone must bound the served error; the
    traffic is mostly exact repeats (as real traffic is), so the share of would-be hits is
    small and MIN_HIT_CHECKS agreeing checks suffice."""
    cache = _cache(max_error=0.05, verification=Verification(0.05, sample_rate=0.0, seed=1))
    checks = cache.verification
    assert checks is not None
    upstream = Upstream("answer 8")
    rng = random.Random(0)
    unchecked = None
    for turn in range(400):
        if turn % 10 == 0:  # one would-be hit in ten lookups
            got = cache.get_or_generate(REWORDED, upstream)
            cache.invalidate(query=REWORDED)  # keep it a paraphrase hit, not a repeat
            if got.lookup.hit and not got.generated:
                unchecked = turn
                break
        else:
            i = rng.randrange(len(TOPICS))
            cache.get_or_generate(TOPICS[i], Upstream(f"answer {i}"))
    assert unchecked is not None, checks.served_bound("default")
    assert checks.forced >= MIN_HIT_CHECKS and checks.mismatches == 0
    assert checks.served_bound("default") <= 0.05
    # Bounded: a look-up without a signal serves it too (the cache's own checks back it).
    assert cache.lookup(REWORDED).hit
    # The bound is per namespace: another tenant still checks.
    other = cache.get_or_generate(REWORDED, upstream, namespace="other")
    assert not other.lookup.hit  # its namespace is empty: generated, stored there


def test_lookup_without_a_signal_falls_back_and_says_so() -> None:
    cache = _cache()
    found = cache.lookup(REWORDED)
    assert not found.hit and found.reason.startswith("no verification signal"), found.reason
    assert cache.lookup(QUESTION.upper()).hit  # exact repeats are always served
    # Opting out of checks: every lookup decides with the fallback, get_or_generate too.
    plain = _cache(verification=None)
    assert plain.verification is None
    upstream = Upstream("answer 8")
    got = plain.get_or_generate(REWORDED, upstream)
    assert not got.lookup.hit and not got.checked and upstream.calls == [REWORDED]
    assert "no verification signal" in got.lookup.reason
    # The fallback is the shipped threshold at δ × FALLBACK_SHARE (none at 0.005: inf).
    verifier = default_verifier()
    assert fallback_threshold(verifier, 0.05) == verifier.threshold(0.05 * FALLBACK_SHARE)
    assert fallback_threshold(verifier, 0.05) > verifier.threshold(0.05)
    assert fallback_threshold(verifier, 0.01) == float("inf")


def test_answer_text_of_json_responses() -> None:
    assert answer_text("Paris") == "Paris"
    assert answer_text({"text": "Paris", "model": "x"}) == "Paris"
    chat = {"choices": [{"message": {"role": "assistant", "content": "Paris"}}]}
    assert answer_text(chat) == "Paris"
    assert answer_text({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert answer_text(42) == "42" and answer_text(None) == "null"
    cache = _cache()
    cache.store(QUESTION, {"text": "Paris", "usage": 12})  # replaces the string answer
    got = cache.get_or_generate(REWORDED, lambda q: {"text": "  paris "})
    assert got.lookup.hit and got.checked and got.response == {"text": "Paris", "usage": 12}


def test_bad_equivalent_max_error_or_verification_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="equivalent must be a callable"):
        SemanticCache(_embed, equivalent=42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_error must be a rate"):
        SemanticCache(_embed, max_error=1.5)
    with pytest.raises(ConfigError, match="verification must be a Verification"):
        SemanticCache(_embed, verification="yes")  # type: ignore[arg-type]
    cache = _cache(equivalent=lambda a, b: "yes")
    with pytest.raises(ConfigError, match="equivalent must return a bool"):
        cache.get_or_generate(REWORDED, Upstream("answer 8"))
    with pytest.raises(ConfigError, match="awaitable"):

        async def later(query: str) -> str:
            return "answer 8"

        _cache().get_or_generate(REWORDED, later)  # type: ignore[arg-type]


def test_the_shared_protocol_plans_as_the_gateway_did() -> None:
    checks = Verification(0.01, sample_rate=0.0)
    plan = plan_check(checks, hit=True, query="a b?", cached_query="A  b", scope="t")
    assert plan == CheckPlan("t", sampled=False, guess=False, forced=False)  # exact repeat
    plan = plan_check(checks, hit=True, query="a b c", cached_query="a b", scope="t")
    assert plan.guess and plan.forced and plan.check_hit
    waited = plan_check(checks, hit=True, query="a b c", cached_query="a b", eligible=False)
    assert not waited.guess and not waited.forced
    assert plan_check(None, hit=True, query="x", cached_query="y") == CheckPlan()
    record_check(checks, plan, 0.9, False, entry="k", paid=True)
    assert checks.contested("k") == 0.9 and checks.paid == 1 and checks.forced == 1
    # A draw only where a check can follow.
    always = Verification(0.01, sample_rate=1.0)
    assert plan_check(always, hit=False, query="x", cached_query=None).sampled
    assert not plan_check(always, hit=False, query="x", cached_query=None, draw=False).sampled


@pytest.mark.parametrize("delta", [0.01, 0.05])
def test_a_corpus_replay_through_get_or_generate_stays_within_delta(delta: float) -> None:
    """300 triples of the tune split, read-through as the gateway replay runs them: the
    questions, then every paraphrase and near-miss shuffled; ``generate`` answers by
    meaning. The share of lookups served a wrong answer stays ≤ δ."""
    rows = cache_corpus.triples("tune")[:300]
    answers: dict[str, str] = {}
    for t in rows:
        answers[t.query] = answers[t.paraphrase] = f"Answer {t.id}."
        answers[t.near_miss] = f"Answer {t.id}, the near-miss."
    cache = SemanticCache(
        TermEmbedder(), index=MatrixIndex(), capacity=10_000, max_error=delta,
        verification=Verification(delta, seed=0),
    )  # fmt: skip
    for t in rows:
        cache.get_or_generate(t.query, answers.__getitem__)
    asked = [t.paraphrase for t in rows] + [t.near_miss for t in rows]
    random.Random(3).shuffle(asked)
    wrong = served = 0
    for text in asked:
        got = cache.get_or_generate(text, answers.__getitem__)
        wrong += got.response != answers[text]
        served += got.lookup.hit
    assert wrong <= delta * len(asked), (wrong, len(asked))
    checks = cache.verification
    assert checks is not None and checks.checked > 0  # every judged miss is compared too
    if delta >= 0.05:  # at 0.01 the word-term embedder's would-be hits are too rare here
        assert served > 0 and checks.forced > 0
