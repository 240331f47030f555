"""EnterpriseRetriever: fusion, MMR, the relevance floor, citations, scope, concurrency.

Every test runs the real pipeline over a real in-process vector store (``memory://``) and
the BM25 arm, embedding with the model-free hashed-terms embedder. The bridge tests that
need a model answer live in tests/runtime/test_retriever_answer.py (a loopback server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from evermind.bridges.base import Completion
from evermind.bridges.caching import TermEmbedder
from evermind.bridges.openai import OpenAIBridge
from evermind.errors import ConfigError, InputError, ShapeError
from evermind.memory.embedder import as_embedder
from evermind.retrieval import (
    REFUSAL,
    BM25Arm,
    EnterpriseRetriever,
    Passage,
    RelevanceFloor,
    SearchResult,
    StoreLexicalArm,
    build_request,
    parse_citations,
    source_of,
)
from evermind.retrieval.citations import read_answer
from evermind.retrieval.lexical import any_words
from evermind.vectorstore import AccessScope, Acl, Eq, Hit, ScopeRequired, VectorItem, open_store

DIM = 128
ACME = Acl("acme", frozenset({"group:support"}))
SCOPE = AccessScope("acme", frozenset({"user:ana", "group:support"}))
DOCS = {
    "kb/config.md#0@aaa": "The server listens on port 7420 by default; server.listen changes it.",
    "kb/config.md#1@bbb": "Retries use exponential backoff with a base delay of two seconds.",
    "kb/config.md#2@ccc": "Failed jobs are kept for seven days, then purged by a sweep.",
    "kb/tls.md#0@ddd": "The server reloads its TLS certificate and key on SIGHUP.",
    "kb/faq.html#0@eee": "Refunds are paid within thirty days of the first invoice.",
    "kb/faq.html#1@fff": "Support answers email within one business day.",
}


def embedder() -> Any:
    hashed = TermEmbedder(DIM)
    return as_embedder(lambda texts: [hashed(t) for t in texts], fingerprint=hashed.fingerprint)


async def build(
    docs: dict[str, str] = DOCS, acls: dict[str, Acl] | None = None, **options: Any
) -> EnterpriseRetriever:
    bound = embedder()
    vectors = await bound.embed(list(docs.values()))
    items = [
        VectorItem(key, vector, text, {"source": source_of(key, {})}, (acls or {}).get(key, ACME))
        for (key, text), vector in zip(docs.items(), vectors, strict=True)
    ]
    store = await open_store("memory://", dim=DIM)
    await store.upsert(items)
    options.setdefault("lexical", BM25Arm(items))
    return EnterpriseRetriever(store, bound, **options)


def search(question: str, k: int = 3, **options: Any) -> SearchResult:
    async def main() -> SearchResult:
        retriever = await build(**options)
        return await retriever.search(question, SCOPE, k)

    return asyncio.run(main())


# --- the lexical arm ------------------------------------------------------------------


def test_the_store_arm_asks_for_any_word() -> None:
    assert any_words('Why -not use NFS, or "SQLite"? server.listen\'s') == (
        "Why or not or use or NFS or SQLite or server.listen's"
    )


def test_search_fuses_both_arms_and_says_so() -> None:
    for fusion in ("convex", "rrf"):
        result = search("Which port does the server listen on?", fusion=fusion)
        assert not result.refused
        assert result.passages[0].id == "kb/config.md#0@aaa"
        best = result.passages[0]
        assert best.cosine is not None and best.lexical is not None and best.score == 1.0
        assert best.source == "kb/config.md" and best.coverage == 1.0
        assert ("convex w=0.50" if fusion == "convex" else "rrf k=60") in result.ranked_by
        assert result.ranked_by.startswith("dense+lexical")


def test_dense_only_without_a_lexical_arm() -> None:
    result = search("Which port does the server listen on?", lexical=None)
    assert result.ranked_by.startswith("dense only")
    assert result.passages[0].id == "kb/config.md#0@aaa" and result.passages[0].lexical is None


# --- MMR -----------------------------------------------------------------------------

DUPLICATES = {
    "a.md#0@1": "Backoff delay doubles each attempt; the base delay is two seconds.",
    "a.md#1@2": "Backoff delay doubles each attempt; the base delay is two seconds, capped.",
    "b.md#0@3": "Jitter spreads the backoff delay of retries so bursts do not align.",
}


def test_mmr_puts_a_different_passage_before_a_near_duplicate() -> None:
    question = "What is the backoff delay of each attempt?"
    low = RelevanceFloor(min_coverage=0.3)  # b.md covers "backoff delay", not "attempt"
    plain = search(question, k=2, docs=DUPLICATES, mmr_lambda=None, floor=low)
    diverse = search(question, k=2, docs=DUPLICATES, mmr_lambda=0.3, floor=low)
    assert {p.id for p in plain.passages} == {"a.md#0@1", "a.md#1@2"}
    assert [p.id for p in diverse.passages][1] == "b.md#0@3"
    assert "mmr λ=0.30" in diverse.ranked_by and "mmr" not in plain.ranked_by


# --- the relevance floor ----------------------------------------------------------------


def test_nothing_relevant_is_a_refusal() -> None:
    result = search("How do I configure single sign-on with Okta?")
    assert result.refused and result.passages == ()
    assert "relevance floor" in result.reason and result.candidates > 0


def test_the_floor_drops_weak_passages_but_keeps_the_answer() -> None:
    result = search("Which port does the server listen on?", k=6)
    assert all(p.coverage >= 0.6 for p in result.passages)
    assert len(result.passages) < len(DOCS)


def test_a_cosine_floor_admits_what_coverage_alone_would_not() -> None:
    question = "server port listen okta sso saml"
    strict = search(question, floor=RelevanceFloor(min_coverage=0.9))
    loose = search(question, floor=RelevanceFloor(min_coverage=0.9, min_cosine=0.2))
    assert strict.refused
    assert not loose.refused and loose.passages[0].cosine is not None
    assert loose.passages[0].cosine >= 0.2


def test_floor_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="nothing could ever be admitted"):
        RelevanceFloor(min_coverage=None, min_cosine=None)
    with pytest.raises(ConfigError, match="min_coverage"):
        RelevanceFloor(min_coverage=0.0)


def test_refused_answer_never_calls_the_bridge() -> None:
    async def main() -> None:
        retriever = await build()
        # A bridge to a port nothing listens on: any call would raise UpstreamError.
        bridge = OpenAIBridge(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0)
        try:
            answer = await retriever.answer("What is the capital of France?", bridge, SCOPE)
        finally:
            await bridge.aclose()
        assert answer.refused and answer.text == REFUSAL and answer.completion is None
        assert answer.citations == () and not answer.grounded

    asyncio.run(main())


# --- citations -------------------------------------------------------------------------


def _passage(n: int) -> Passage:
    return Passage(f"s{n}.md#0@x", f"s{n}.md", f"text {n}", 1.0, 0.5, 1.0, 1.0)


def _result(count: int) -> SearchResult:
    passages = tuple(_passage(n) for n in range(1, count + 1))
    return SearchResult("q?", passages, False, "", count, "test")


def test_citation_forms_are_parsed() -> None:
    assert parse_citations("A [1]. B [2, 3]. C [4][5]. Not a citation: [x] [].") == [1, 2, 3, 4, 5]


def test_citations_map_to_passages_and_invalid_ones_are_caught() -> None:
    done = Completion("Port 7420 [2]. Also [2] and [0], [9][1].", "m", "openai")
    answer = read_answer(_result(3), done)
    assert [c.number for c in answer.citations] == [2, 1]
    assert [c.source for c in answer.citations] == ["s2.md", "s1.md"]
    assert answer.citations[0].passage.id == "s2.md#0@x"
    assert answer.invalid == (0, 9) and not answer.grounded
    good = read_answer(_result(3), Completion("It is 7420 [3].", "m", "openai"))
    assert good.grounded and good.cited_sources == ("s3.md",)


def test_uncited_and_model_refusals() -> None:
    uncited = read_answer(_result(2), Completion("It is 7420.", "m", "openai"))
    assert not uncited.refused and not uncited.grounded and uncited.citations == ()
    declined = read_answer(_result(2), Completion("I don't have that.", "m", "openai"))
    assert declined.refused and "model" in declined.reason


def test_the_prompt_numbers_the_sources() -> None:
    request = build_request("What port?", _result(2).passages, model="m", max_tokens=64, tenant="t")
    text = request.messages[0].text()
    assert "[1] (source: s1.md)\ntext 1" in text and "[2] (source: s2.md)\ntext 2" in text
    assert text.endswith("Question: What port?")
    assert request.system is not None and REFUSAL in request.system
    assert request.temperature == 0.0 and request.tenant == "t"


# --- scope, filter, input ----------------------------------------------------------------


def test_scope_is_required_and_enforced_in_both_arms() -> None:
    other = Acl("globex", frozenset({"group:support"}))
    secret = Acl("acme", frozenset({"group:support"}), sensitivity=2)
    acls = {"kb/config.md#0@aaa": other, "kb/tls.md#0@ddd": secret}

    async def main() -> None:
        retriever = await build(acls=acls)
        with pytest.raises(ScopeRequired):
            await retriever.search("Which port does the server listen on?", None)
        with pytest.raises(ScopeRequired):
            await retriever.answer("Which port?", None, None)  # type: ignore[arg-type]
        seen = await retriever.search("Which port does the server listen on?", SCOPE, 6)
        assert "kb/config.md#0@aaa" not in {p.id for p in seen.passages}
        tls = await retriever.search("How is the TLS certificate reloaded?", SCOPE, 6)
        assert "kb/tls.md#0@ddd" not in {p.id for p in tls.passages}
        cleared = AccessScope("acme", frozenset({"group:support"}), max_sensitivity=2)
        tls2 = await retriever.search("How is the TLS certificate reloaded?", cleared, 6)
        assert tls2.passages[0].id == "kb/tls.md#0@ddd"
        globex = AccessScope("globex", frozenset({"group:support"}))
        theirs = await retriever.search("Which port does the server listen on?", globex, 6)
        assert [p.id for p in theirs.passages] == ["kb/config.md#0@aaa"]
        assert retriever.lexical is not None
        lexical = await retriever.lexical.search("port server listen", 6, None, globex)
        assert [h.id for h in lexical] == ["kb/config.md#0@aaa"]

    asyncio.run(main())


def test_another_tenants_documents_never_move_a_tenants_bm25() -> None:
    """BM25Arm keeps one index per tenant: globex filling its index with the word "server"
    (which lowers that word's IDF in a shared index) changes nothing acme sees."""
    mine = [VectorItem(k, [1.0] + [0.0] * 7, t, {}, ACME) for k, t in DOCS.items()]
    theirs = Acl("globex", frozenset({"group:support"}))
    flood = [
        VectorItem(f"g/{i}#0@x", [1.0] + [0.0] * 7, f"server server note {i}", {}, theirs)
        for i in range(50)
    ]

    async def main() -> tuple[list[Hit], list[float], list[Hit], list[float]]:
        words = ["server", "port", "certificate"]
        alone = BM25Arm(mine)
        shared = BM25Arm(mine + flood)
        return (
            await alone.search("server port certificate", 6, None, SCOPE),
            [alone.term_weight(w, SCOPE) for w in words],
            await shared.search("server port certificate", 6, None, SCOPE),
            [shared.term_weight(w, SCOPE) for w in words],
        )

    hits_alone, weights_alone, hits_shared, weights_shared = asyncio.run(main())
    assert [(h.id, h.score) for h in hits_shared] == [(h.id, h.score) for h in hits_alone]
    assert weights_shared == weights_alone
    # An id upserted again under another tenant leaves the old tenant's index.
    moved = BM25Arm(flood)
    moved.add([VectorItem("g/0#0@x", [1.0] + [0.0] * 7, "refund policy", {}, ACME)])
    globex = AccessScope("globex", frozenset({"group:support"}))
    left = asyncio.run(moved.search("server note 0", 50, None, globex))
    assert "g/0#0@x" not in {h.id for h in left} and len(left) == 49
    assert [h.id for h in asyncio.run(moved.search("refund", 5, None, SCOPE))] == ["g/0#0@x"]
    with pytest.raises(ScopeRequired):
        moved.term_weight("server", None)  # type: ignore[arg-type]


def test_a_filter_reaches_both_arms() -> None:
    async def main() -> None:
        retriever = await build()
        result = await retriever.search("server", SCOPE, 6, filter=Eq("source", "kb/tls.md"))
        assert [p.id for p in result.passages] == ["kb/tls.md#0@ddd"]

    asyncio.run(main())


def test_bad_input_is_a_domain_error() -> None:
    async def main() -> None:
        retriever = await build()
        with pytest.raises(InputError, match="question is empty"):
            await retriever.search("   ", SCOPE)
        with pytest.raises(InputError, match="k must be"):
            await retriever.search("port", SCOPE, 0)
        with pytest.raises(InputError, match="has no ACL"):
            BM25Arm([VectorItem("x", [1.0], "text")])

    asyncio.run(main())
    with pytest.raises(ConfigError, match="fusion"):
        EnterpriseRetriever(None, embedder(), fusion="max")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lexical_query"):
        StoreLexicalArm(object())


# --- reranker and concurrency ------------------------------------------------------------


def test_a_reranker_reorders_and_is_checked() -> None:
    def prefer_faq(question: str, passages: Sequence[Passage]) -> list[float]:
        return [1.0 if p.source == "kb/faq.html" else 0.0 for p in passages]

    question = "When does support answer refunds email?"
    plain = search(question, k=3)
    reranked = search(question, k=3, reranker=prefer_faq, mmr_lambda=None)
    assert reranked.passages[0].source == "kb/faq.html" and reranked.passages[0].rerank == 1.0
    assert "reranked" in reranked.ranked_by and plain.passages[0].rerank is None

    async def wrong(question: str, passages: Sequence[Passage]) -> list[float]:
        return [1.0] * (len(passages) + 1)

    with pytest.raises(ShapeError, match="one score per passage"):
        search("Which port does the server listen on?", reranker=wrong)


class _Gate:
    """Instrumentation around the real arms: each waits until the other has started."""

    def __init__(self) -> None:
        self.dense_started = asyncio.Event()
        self.lexical_started = asyncio.Event()


class _WaitingStore:
    def __init__(self, store: Any, gate: _Gate) -> None:
        self._store, self._gate, self.dim = store, gate, store.dim

    async def query(
        self, vector: Any, k: int, filter: object = None, scope: Any = None
    ) -> list[Hit]:
        self._gate.dense_started.set()
        await asyncio.wait_for(self._gate.lexical_started.wait(), 5)
        hits: list[Hit] = await self._store.query(vector, k, filter, scope)
        return hits


class _WaitingLexical:
    def __init__(self, arm: BM25Arm, gate: _Gate) -> None:
        self._arm, self._gate = arm, gate

    async def search(
        self, text: str, k: int, filter: object = None, scope: Any = None
    ) -> list[Hit]:
        self._gate.lexical_started.set()
        await asyncio.wait_for(self._gate.dense_started.wait(), 5)
        return await self._arm.search(text, k, filter, scope)

    def term_weight(self, term: str, scope: Any) -> float:
        return self._arm.term_weight(term, scope)


def test_the_arms_run_concurrently() -> None:
    """Each arm waits for the other to start: run one after the other, this times out."""

    async def main() -> SearchResult:
        retriever = await build()
        gate = _Gate()
        assert retriever.lexical is not None
        wrapped = EnterpriseRetriever(
            _WaitingStore(retriever.store, gate),  # type: ignore[arg-type]
            retriever.embedder,
            lexical=_WaitingLexical(retriever.lexical, gate),  # type: ignore[arg-type]
        )
        return await wrapped.search("Which port does the server listen on?", SCOPE)

    result = asyncio.run(main())
    assert result.passages[0].id == "kb/config.md#0@aaa"
