"""What ``make demo`` measures once the package is served: each number computed here, none canned.

- :func:`language_report`: held-out perplexity of the trained model on text it never saw,
  beside a uniform guess over the vocabulary and a unigram model counted on the training text.
- :func:`memory_report`: facts remembered through the runtime's HTTP memory API; each
  question recalled with the package's embedder (``model``) and lexically (no ``model``).
- :func:`cache_report`: :class:`evermind.cache.SemanticCache` with its default verified
  decision (δ = 0.01) and the package's embedder: each fixed triple's query stored, its
  paraphrase and its near-miss looked up; every decision and its reason as the cache gives it.
- :func:`gateway_replay`: ``evermind serve --upstreams`` in front of the loopback OpenAI
  upstream (:class:`benchmarks.gateway.Processes`), a replay with repeats, paraphrases and
  near-misses; hits, upstream calls and dollars as the response's ``evermind`` field and
  ``/metrics`` report them.

The examples are the fixed set in ``demo_set.json`` (written before any run) and the first
triples of the cache corpus's ``report`` split, of which only counts are shown (the corpus's
protocol: never print the report split case by case). The demo prints; these functions return.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from evermind.cache import CacheLookup, SemanticCache
from evermind.model.inference import Model
from evermind.search.matrix import MatrixIndex

#: The demo's fixed examples: facts and questions for memory, triples for the cache.
DEMO_SET = Path(__file__).resolve().parent / "demo_set.json"
#: The priced upstream model the gateway replay asks for (its price is in the price table).
REPLAY_MODEL = "gpt-4o"


def demo_set() -> dict[str, Any]:
    """The fixed examples of ``demo_set.json``."""
    data: dict[str, Any] = json.loads(DEMO_SET.read_text(encoding="utf-8"))
    return data


# -- what the model learned ------------------------------------------------------------------
@dataclass(frozen=True)
class LanguageReport:
    """Held-out perplexities, per token of the package's tokenizer."""

    tokens: int  # predicted tokens of the held-out text
    perplexity: float  # the trained model's
    uniform: float  # a uniform guess over the vocabulary: vocab_size
    unigram: float  # token frequencies of the training text, add-one smoothed
    top1: float  # the model's next-token accuracy
    seconds: float


def held_out_text(max_chars: int = 20_000) -> str:
    """Python's language-reference help topics (``help("if")``), sorted by name, cut.

    The demo's corpus is the first 400 kB of standard-library docstrings in module order;
    :func:`evermind.train.corpus.iter_stdlib_docstrings` yields these topics after every
    docstring, so none of this text is in what the model trained on.
    """
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name].strip() for name in sorted(topics))[:max_chars]


def unigram_perplexity(train_ids: Sequence[int], held_ids: Sequence[int], vocab_size: int) -> float:
    """Perplexity on ``held_ids[1:]`` (the targets a language model predicts) of token
    frequencies counted on ``train_ids``, each count plus one so no token has probability 0."""
    counts = Counter(train_ids)
    total = len(train_ids) + vocab_size
    targets = held_ids[1:]
    nll = -sum(math.log((counts[t] + 1) / total) for t in targets)
    return math.exp(nll / max(1, len(targets)))


def language_report(model: Model, held_out: str, train_text: str) -> LanguageReport:
    """The model's perplexity on ``held_out`` beside uniform and unigram (``train_text``)."""
    start = time.perf_counter()
    metrics = model.evaluate(held_out)
    vocab_size = model.config.vocab_size
    unigram = unigram_perplexity(
        model.tokenizer.encode(train_text), model.tokenizer.encode(held_out), vocab_size
    )
    return LanguageReport(
        tokens=int(metrics["tokens"]),
        perplexity=metrics["perplexity"],
        uniform=float(vocab_size),
        unigram=unigram,
        top1=metrics["top1_accuracy"],
        seconds=time.perf_counter() - start,
    )


# -- memory recall ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Recalled:
    """One recall's ranking: keys best first, with their scores (the store's final score,
    relative to the best candidate: the top hit scores about 1.0, the rest say how close)."""

    keys: list[str]
    scores: list[float]

    def rank_of(self, key: str) -> int | None:
        """1 for the top hit; None when ``key`` was not recalled at all."""
        return self.keys.index(key) + 1 if key in self.keys else None


@dataclass(frozen=True)
class RecallRow:
    """One question, the key it should recall, and what each recall ranked."""

    question: str
    expect: str
    trained: Recalled  # hybrid recall with the package's embedder (``model``)
    lexical: Recalled  # BM25 only (no ``model``)


def _recall(http: httpx.Client, body: dict[str, Any]) -> Recalled:
    hits = http.post("/v1/memory/recall", json=body).raise_for_status().json()["data"]
    return Recalled([h["key"] for h in hits], [float(h["score"]) for h in hits])


def memory_report(
    http: httpx.Client,
    model_id: str,
    facts: Sequence[dict[str, str]],
    questions: Sequence[dict[str, str]],
    namespace: str = "demo-recall",
) -> list[RecallRow]:
    """Remembers ``facts`` over ``/v1/memory/remember`` (embedded by ``model_id``), then
    recalls each question over ``/v1/memory/recall`` with the model and lexically."""
    for fact in facts:
        http.post(
            "/v1/memory/remember",
            json={"namespace": namespace, "model": model_id, **fact},
        ).raise_for_status()
    rows = []
    for item in questions:
        scope = {"namespace": namespace, "query": item["question"], "top_k": len(facts)}
        trained = _recall(http, {**scope, "model": model_id})
        rows.append(RecallRow(item["question"], item["expect"], trained, _recall(http, scope)))
    return rows


# -- the semantic cache ----------------------------------------------------------------------
@dataclass(frozen=True)
class CacheCase:
    """One lookup: a paraphrase (serving is right) or a near-miss (serving is wrong)."""

    kind: str  # paraphrase | near_miss
    asked: str
    stored: str
    lookup: CacheLookup
    served_right: bool  # a hit that served the asked triple's own answer to a paraphrase


@dataclass(frozen=True)
class CacheReport:
    """Every lookup, and the counts a person compares."""

    cases: list[CacheCase]
    paraphrases: int
    paraphrases_served: int
    near_misses: int
    near_misses_served: int
    wrong_served: int  # near-misses served plus paraphrases served another triple's answer
    seconds: float


def model_embedder(model: Model) -> Any:
    """``text -> vector`` with the package's embedder, as the gateway wraps it."""

    def embed(text: str) -> list[float]:
        vector: list[float] = model.embed([text])[0].tolist()
        return vector

    embed.similarity_trained = model.similarity_trained  # type: ignore[attr-defined]
    return embed


def cache_report(model: Model, triples: Sequence[dict[str, str]]) -> CacheReport:
    """Stores every triple's query, then looks up each paraphrase and near-miss, through a
    :class:`SemanticCache` with its defaults (the verified decision, δ = 0.01)."""
    start = time.perf_counter()
    cache = SemanticCache(
        model_embedder(model),
        fingerprint=f"evermind:{model.fingerprint}",
        index=MatrixIndex(),
    )
    for number, triple in enumerate(triples):
        cache.store(triple["query"], number)
    cases = []
    for number, triple in enumerate(triples):
        for kind in ("paraphrase", "near_miss"):
            found = cache.lookup(triple[kind])
            right = found.hit and kind == "paraphrase" and found.response == number
            cases.append(CacheCase(kind, triple[kind], triple["query"], found, right))
    para = [c for c in cases if c.kind == "paraphrase"]
    near = [c for c in cases if c.kind == "near_miss"]
    return CacheReport(
        cases=cases,
        paraphrases=len(para),
        paraphrases_served=sum(c.lookup.hit for c in para),
        near_misses=len(near),
        near_misses_served=sum(c.lookup.hit for c in near),
        wrong_served=sum(c.lookup.hit and not c.served_right for c in cases),
        seconds=time.perf_counter() - start,
    )


# -- the caching gateway ---------------------------------------------------------------------
@dataclass(frozen=True)
class ReplayReport:
    """A gateway replay: what went upstream, what the cache answered, what it saved."""

    requests: int
    hits: dict[str, int]  # by kind: query, repeat, paraphrase, near_miss
    sent: dict[str, int]
    checked: dict[str, int]  # hits the gateway checked against the upstream first (paid)
    upstream_calls: int  # misses and checked hits: each one a paid upstream call
    wrong_served: int  # hits whose stored question is not the asked one or its paraphrase
    saved_usd: float  # summed over the responses' ``evermind.saved_usd``
    paid_usd: float  # summed over the responses' ``evermind.cost_usd``
    metrics_saved_usd: float  # ``evermind_gateway_saved_usd_total`` on /metrics
    metrics_hits: int  # ``evermind_gateway_requests_total`` with cache hit-l1 or hit-l2
    seconds: float


def metric_total(text: str, name: str, label: str = "") -> float:
    """The sum of a Prometheus metric's samples whose labels contain ``label``."""
    pattern = re.compile(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", re.M)
    return sum(float(value) for labels, value in pattern.findall(text) if label in labels)


def gateway_replay(package: Path, triples: Sequence[dict[str, str]]) -> ReplayReport:
    """Replays ``triples`` (every query, then in a seeded shuffle each query again, its
    paraphrase and its near-miss) through ``evermind serve --upstreams`` whose cache embeds
    with ``package``, in front of the loopback OpenAI upstream."""
    from benchmarks.gateway import Processes, body
    from evals.cache_replay import replay_set

    start = time.perf_counter()
    asks = replay_set(triples)
    sent = dict.fromkeys(("query", "repeat", "paraphrase", "near_miss"), 0)
    hits = dict(sent)
    checked = dict(sent)
    saved = paid = 0.0
    wrong = 0
    with tempfile.TemporaryDirectory() as folder:
        procs = Processes(Path(folder), f"package:{Path(package).resolve()}")
        try:
            with httpx.Client(base_url=procs.url, timeout=120) as client:
                for ask in asks:
                    payload = body(ask.text, f"openai/{REPLAY_MODEL}")
                    response = client.post("/v1/chat/completions", json=payload)
                    field = response.raise_for_status().json()["evermind"]
                    sent[ask.kind] += 1
                    paid += field.get("cost_usd") or 0.0
                    if field.get("cached"):
                        hits[ask.kind] += 1
                        checked[ask.kind] += "checked against the upstream" in str(
                            field.get("detail", "")
                        )
                        saved += field.get("saved_usd") or 0.0
                        triple = triples[ask.triple]
                        right = (triple["query"], triple["paraphrase"])
                        wrong += ask.kind == "near_miss" or field.get("cached_query") not in right
                metrics = client.get("/metrics").raise_for_status().text
        finally:
            procs.stop()
    return ReplayReport(
        requests=len(asks),
        hits=hits,
        sent=sent,
        checked=checked,
        upstream_calls=len(asks) - sum(hits.values()) + sum(checked.values()),
        wrong_served=wrong,
        saved_usd=saved,
        paid_usd=paid,
        metrics_saved_usd=metric_total(metrics, "evermind_gateway_saved_usd_total"),
        metrics_hits=int(
            metric_total(metrics, "evermind_gateway_requests_total", 'cache="hit-l1"')
            + metric_total(metrics, "evermind_gateway_requests_total", 'cache="hit-l2"')
        ),
        seconds=time.perf_counter() - start,
    )
