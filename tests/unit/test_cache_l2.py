"""L2 semantic cache over its transport seam, with a small recorded exchange.

The runtime's server side is built later, so these tests drive
``HttpSemanticCacheBackend`` through its transport callable: each test replays the
request/response pairs the protocol defines and checks what the client sends.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import zlib
from collections.abc import Sequence

import pytest

from evermind.cache import HttpRequest, HttpResponse, HttpSemanticCacheBackend, SemanticCache
from evermind.cache.verified import Verification
from evermind.errors import ConfigError, StorageError

VECTORS: dict[str, tuple[float, ...]] = {
    "Weather in Oslo": (1.0, 0.0),
    "What's the weather like in Oslo?": (0.8, 0.6),
    "Weather in Bergen": (0.99, 0.141),
}


class Recorded:
    """A transport that replays recorded responses and keeps the requests it saw."""

    def __init__(self, responses: list[HttpResponse]) -> None:
        self.responses = list(responses)
        self.requests: list[HttpRequest] = []

    def __call__(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        return self.responses.pop(0)

    def bodies(self) -> list[dict[str, object]]:
        return [json.loads(r.body) for r in self.requests]


def ok(payload: object) -> HttpResponse:
    return HttpResponse(200, json.dumps(payload).encode())


def embed(text: str) -> Sequence[float]:
    return VECTORS[text]


def test_lookup_request_and_hit_parsing() -> None:
    transport = Recorded([ok({"hit": {"response": "cold", "score": 0.93, "query": "q"}})])
    backend = HttpSemanticCacheBackend("http://rt.local/", "tok", "team", transport=transport)
    hit = backend.lookup([1.0, 0.0], 0.9, "default@emb", "Weather in Oslo")
    assert hit is not None and hit.response == "cold" and hit.score == 0.93 and hit.query == "q"
    request = transport.requests[0]
    assert request.method == "POST"
    assert request.url == "http://rt.local/v1/semantic-cache/lookup"
    assert request.headers["Authorization"] == "Bearer tok"
    assert transport.bodies()[0] == {
        "embedding": [1.0, 0.0],
        "threshold": 0.9,
        "max_error": 0.01,
        "namespace": "team/default@emb",
        "query": "Weather in Oslo",
    }


def test_empty_object_is_a_miss_and_store_posts_the_protocol_body() -> None:
    transport = Recorded([ok({}), HttpResponse(204)])
    backend = HttpSemanticCacheBackend("https://rt.local", "", transport=transport)
    assert backend.lookup([0.6, 0.8], 0.85, None, None, max_error=None) is None
    backend.store([0.6, 0.8], {"text": "cold"}, "ns", {"model": "m"}, "Weather in Oslo")
    assert "Authorization" not in transport.requests[0].headers
    assert transport.requests[1].url == "https://rt.local/v1/semantic-cache/store"
    assert transport.bodies() == [
        {"embedding": [0.6, 0.8], "threshold": 0.85, "max_error": "off"},
        {
            "embedding": [0.6, 0.8],
            "response": {"text": "cold"},
            "namespace": "ns",
            "meta": {"model": "m"},
            "query": "Weather in Oslo",
        },
    ]


@pytest.mark.parametrize(
    "answer",
    [
        HttpResponse(500, b"boom"),
        HttpResponse(200, b"not json"),
        ok([1, 2]),
        ok({"hit": {"score": 1}}),
    ],
)
def test_bad_answers_raise_storage_error(answer: HttpResponse) -> None:
    backend = HttpSemanticCacheBackend("http://rt", "t", transport=Recorded([answer]))
    with pytest.raises(StorageError):
        backend.lookup([1.0], 0.9, None, None)


def test_backend_validates_its_arguments() -> None:
    with pytest.raises(ConfigError, match="http"):
        HttpSemanticCacheBackend("rt.local", "t", transport=Recorded([]))


def test_cache_serves_a_guarded_l2_hit_and_promotes_it_to_l1() -> None:
    transport = Recorded(
        [ok({"hit": {"response": "cold", "score": 0.95, "query": "Weather in Oslo"}})]
    )
    backend = HttpSemanticCacheBackend("http://rt", "t", "team", transport=transport)
    cache = SemanticCache(embed, threshold=0.9, l2=backend, fingerprint="emb-1")
    found = cache.lookup("Weather in Oslo")
    assert found.hit and found.tier == "l2" and found.response == "cold"
    assert transport.bodies()[0]["namespace"] == "team/default@emb-1"
    again = cache.lookup("Weather in Oslo")  # now answered from L1: no second request
    assert again.tier == "l1" and len(transport.requests) == 1
    assert (cache.stats.hits_l1, cache.stats.hits_l2) == (1, 1)


def test_cache_runs_guards_on_l2_hits() -> None:
    near_miss = ok({"hit": {"response": "rain", "score": 0.99, "query": "Weather in Bergen"}})
    unguardable = ok({"hit": {"response": "rain", "score": 0.99}})
    backend = HttpSemanticCacheBackend(
        "http://rt", "t", transport=Recorded([near_miss, unguardable])
    )
    cache = SemanticCache(embed, threshold=0.9, l2=backend, fingerprint="emb-1", max_error=None)
    first = cache.lookup("Weather in Oslo")
    assert not first.hit and first.refused_by == "entity"
    second = cache.lookup("Weather in Oslo")
    assert not second.hit and second.refused_by == "l2_unguarded"
    assert cache.stats.refusals == {"entity": 1, "l2_unguarded": 1}


def _spread(text: str, known: dict[str, tuple[float, ...]]) -> tuple[float, ...]:
    """16-d vectors: ``known`` texts padded with zeros, any other text a random direction
    seeded by its crc32 (unrelated texts score low against each other: the cache calibrates)."""
    if text in known:
        return (*known[text], *([0.0] * (16 - len(known[text]))))
    rng = random.Random(zlib.crc32(text.encode()))
    raw = [rng.gauss(0.0, 1.0) for _ in range(16)]
    norm = math.sqrt(sum(x * x for x in raw))
    return tuple(x / norm for x in raw)


def _fill_embed(text: str) -> Sequence[float]:
    return _spread(text, VECTORS)


FILL = [f"unrelated stored question number {i}" for i in range(12)]


def test_the_verified_cache_judges_l2_hits_with_its_own_decision() -> None:
    """A calibrated L1 (δ 0.01) re-judges an L2 hit with the verifier: a related question
    is refused, and a hit that does not say which question it answers is never served."""
    related = {"response": "yes", "score": 0.8, "query": "Is it cold in Oslo in winter?"}
    near_miss = ok({"hit": related})
    unguardable = ok({"hit": {"response": "rain", "score": 0.99}})
    stores = [ok({}) for _ in FILL]
    backend = HttpSemanticCacheBackend(
        "http://rt", "t", transport=Recorded([*stores, near_miss, unguardable])
    )
    cache = SemanticCache(_fill_embed, l2=backend, fingerprint="emb-1")
    for question in FILL:
        cache.store(question, "an answer")
    assert cache.calibration.unrelated is not None
    first = cache.lookup("Weather in Oslo")
    assert not first.hit and first.refused_by == "verifier"
    assert "shipped bound" in first.reason
    second = cache.lookup("Weather in Oslo")
    assert not second.hit and second.refused_by == "l2_unguarded"


def test_an_l1_too_small_to_calibrate_keeps_the_l2s_verified_judgement() -> None:
    """A fresh L1 (fewer questions than a calibration needs) serves only exact repeats of its
    own, but an L2 hit was judged by the runtime's verified decision at this δ on the L2's
    measured calibration: it is served and promoted; one without its question never is."""
    hit = ok(
        {"hit": {"response": "cold", "score": 0.97, "query": "What's the weather like in Oslo?"}}
    )
    unguardable = ok({"hit": {"response": "rain", "score": 0.99}})
    transport = Recorded([hit, unguardable])
    # The verification is the caller's (as the gateway's is): lookup returns the decision
    # as it is. A cache's own would refuse an unchecked L2 hit here (no signal, not bounded).
    cache = SemanticCache(
        _fill_embed,
        l2=HttpSemanticCacheBackend("http://rt", "t", transport=transport),
        verification=Verification(0.01, sample_rate=0.0),
    )
    assert cache.calibration.unrelated is None
    served = cache.lookup("Weather in Oslo")
    assert served.hit and served.tier == "l2" and served.response == "cold"
    assert transport.bodies()[0]["max_error"] == 0.01  # the L2 judged at this cache's δ
    refused = cache.lookup("Weather in Bergen")  # L1 cannot judge its own entry yet ...
    assert not refused.hit and len(transport.requests) == 2  # ... and the L2's is unguarded
    assert cache.stats.refusals["l2_unguarded"] == 1


def test_l2_failure_degrades_to_a_miss_and_generate_still_runs() -> None:
    transport = Recorded([HttpResponse(503, b"down"), HttpResponse(503, b"down")])
    backend = HttpSemanticCacheBackend("http://rt", "t", transport=transport)
    cache = SemanticCache(embed, threshold=0.9, l2=backend, fingerprint="emb-1")
    answer = cache.get_or_generate("Weather in Oslo", lambda q: "cold")
    assert answer.generated and answer.response == "cold"
    assert cache.stats.l2_errors == 2  # the lookup and the store
    assert cache.lookup("Weather in Oslo").tier == "l1"


def test_async_transport_with_async_cache_methods() -> None:
    seen: list[HttpRequest] = []
    answers = [ok({}), HttpResponse(200, b"")]

    async def transport(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        await asyncio.sleep(0)
        return answers.pop(0)

    backend = HttpSemanticCacheBackend("http://rt", "t", transport=transport)
    cache = SemanticCache(embed, threshold=0.9, l2=backend, fingerprint="emb-1")
    answer = asyncio.run(cache.aget_or_generate("Weather in Oslo", lambda q: "cold"))
    assert answer.generated
    assert [r.url.rsplit("/", 1)[-1] for r in seen] == ["lookup", "store"]
    with pytest.raises(ConfigError, match="async"):
        cache.lookup("What's the weather like in Oslo?")


def test_an_entry_l1_refused_is_not_served_through_l2() -> None:
    """An L1 entry found wrong by a check stays refused when the L2 offers the same entry
    (before, the L2 hit was judged alone, without the entry's mark, and served)."""
    asked, stored = (
        "How can I undo my last commit in git?",
        "How do I revert the most recent git commit?",
    )
    vectors = {asked: (1.0, 0.0), stored: (0.99, 0.141)}
    same_entry = ok({"hit": {"response": "git revert", "score": 0.99, "query": stored}})
    stores = [HttpResponse(204) for _ in range(len(FILL) + 1)]
    transport = Recorded([*stores, same_entry])
    backend = HttpSemanticCacheBackend("http://rt", "t", transport=transport)
    cache = SemanticCache(
        lambda text: _spread(text, vectors),
        l2=backend,
        fingerprint="emb-1",
        verification=Verification(0.01, sample_rate=0.0),
    )
    for question in FILL:  # enough questions for the cache to calibrate its embedder
        cache.store(question, "an answer")
    cache.store(stored, "git revert")
    first = cache.lookup(asked)
    assert first.hit and first.tier == "l1"
    cache.record_verification(first, False, sampled=False)  # the upstream answered otherwise
    again = cache.lookup(asked)
    assert len(transport.requests) == len(stores) + 1  # the L2 was asked, offered the same entry
    assert not again.hit and again.refused_by == "contested", again
