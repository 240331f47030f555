"""The demo's report parts (scripts/demo_report.py) compute what they print, on a tiny package.

Each test ties a printed number to a computation it can check: the perplexity falls with
training and equals the model's own cross-entropy, the unigram baseline equals a numpy count,
the remembered fact whose words a question shares is recalled first over HTTP, the cache's
counts are its lookups', and the gateway replay's dollars saved are what ``/metrics`` says.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import httpx
import numpy as np
import pytest
from scripts.demo_report import (
    cache_report,
    demo_set,
    gateway_replay,
    language_report,
    memory_report,
    metric_total,
    unigram_perplexity,
)

import evermind
from evermind.model.inference import Model
from tests.factories import TEXT, tiny_package

#: TEXT's sentences in another order: no window of it is a window the model trained on.
HELD_OUT = (
    "Memories are recalled by meaning and by exact words; caches save repeated work. "
    "The quick brown fox jumps over the lazy dog. "
    "A selective state space model reads tokens one at a time and keeps a small state. "
    "Evermind remembers what agents learn. "
) * 3
#: Triples whose paraphrase repeats the query (an exact repeat is served) and whose
#: near-miss shares no word with it.
TRIPLES = [
    {
        "query": "how do I read a file line by line in python",
        "paraphrase": "how do I read a file line by line in python",
        "near_miss": "the quick brown fox jumps over the lazy dog",
    },
    {
        "query": "what is the capital city of portugal",
        "paraphrase": "what is the capital city of portugal",
        "near_miss": "caches save repeated work for agents",
    },
]


@lru_cache(maxsize=2)
def _package(steps: int) -> bytes:
    return tiny_package(f"demo-report-{steps}", steps=steps)


def _model(steps: int) -> Model:
    return evermind.load(_package(steps))


def test_perplexity_falls_with_training_and_is_the_models_cross_entropy() -> None:
    trained, untrained = _model(60), _model(0)
    after = language_report(trained, HELD_OUT, TEXT)
    before = language_report(untrained, HELD_OUT, TEXT)
    print(f"perplexity {before.perplexity:.1f} -> {after.perplexity:.1f}; {after}")
    assert after.uniform == before.uniform == trained.config.vocab_size
    assert after.perplexity < 0.5 * before.perplexity
    assert after.perplexity < after.uniform
    assert after.perplexity == pytest.approx(
        math.exp(trained.evaluate(HELD_OUT)["cross_entropy"]), rel=1e-9
    )
    # The unigram baseline, counted again with numpy: add-one counts over the vocabulary.
    counts = np.bincount(trained.tokenizer.encode(TEXT), minlength=trained.config.vocab_size)
    probs = (counts + 1) / (counts.sum() + trained.config.vocab_size)
    targets = trained.tokenizer.encode(HELD_OUT)[1:]
    assert after.unigram == pytest.approx(math.exp(-np.mean(np.log(probs[targets]))), rel=1e-9)
    assert after.tokens == len(targets)
    assert unigram_perplexity([1, 1, 1], [0, 2], 3) == pytest.approx(6.0)  # 1 / ((0+1)/6)


def test_a_remembered_fact_is_recalled_first_over_http(alpha: httpx.Client) -> None:
    pushed = alpha.post(
        "/v1/models",
        content=_package(30),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert pushed.status_code == 201, pushed.text
    facts = [
        {"key": "fox", "content": "The quick brown fox jumps over the lazy dog."},
        {"key": "ssm", "content": "A state space model keeps a small state per token."},
        {"key": "cache", "content": "Caches save repeated work for agents."},
    ]
    questions = [
        {"question": "what does the brown fox jump over?", "expect": "fox"},
        {"question": "what do caches save?", "expect": "cache"},
    ]
    rows = memory_report(alpha, pushed.json()["id"], facts, questions, namespace="demo-test")
    for row in rows:
        print(row)
        assert row.trained.rank_of(row.expect) == 1 and row.lexical.rank_of(row.expect) == 1
        # Semantic recall ranks every memory; lexical recall only those sharing a word.
        assert sorted(row.trained.keys) == ["cache", "fox", "ssm"]
        assert "ssm" not in row.lexical.keys
        assert row.trained.scores == sorted(row.trained.scores, reverse=True)


def test_the_cache_counts_are_its_lookups() -> None:
    report = cache_report(_model(30), TRIPLES)
    for case in report.cases:
        print(case.kind, case.lookup.hit, case.lookup.reason)
        assert case.lookup.reason  # the product's words, never empty
    repeats = [c for c in report.cases if c.kind == "paraphrase"]
    assert all(c.lookup.hit and c.served_right for c in repeats)
    assert (report.paraphrases, report.paraphrases_served) == (2, 2)
    assert report.near_misses == 2
    near_served = sum(c.lookup.hit for c in report.cases if c.kind == "near_miss")
    assert report.near_misses_served == near_served == report.wrong_served


def test_the_gateway_replay_saves_what_metrics_reports(tmp_path: Path) -> None:
    package = tmp_path / "tiny.evermind"
    package.write_bytes(_package(30))
    triples = demo_set()["triples"][:3]
    report = gateway_replay(package, triples)
    print(report)
    assert report.requests == 4 * len(triples)
    assert report.sent == dict.fromkeys(("query", "repeat", "paraphrase", "near_miss"), 3)
    # The first query is stored in an empty cache, so its exact repeat is served.
    assert report.hits["repeat"] >= 1
    # A first-time query or a near-miss served is always another question's answer. (This
    # 30-step tiny model, with no embedding head, embeds every question at cosine ~0.99 to
    # every other, and its gateway has served a first-time query another query's answer; the
    # demo's distilled package has not. So no exact hit count is asserted here.)
    assert report.wrong_served >= report.hits["query"] + report.hits["near_miss"]
    # A hit the gateway checked against the upstream first (until its checks bound the
    # error) was a paid call too.
    assert all(report.checked[kind] <= report.hits[kind] for kind in report.hits)
    assert report.upstream_calls == (
        report.requests - sum(report.hits.values()) + sum(report.checked.values())
    )
    assert report.metrics_hits == sum(report.hits.values())
    assert report.saved_usd > 0 and report.paid_usd > 0
    # /metrics prints dollars to six decimals: they differ by at most half a millionth (and
    # the float sums' own last bits).
    assert abs(report.saved_usd - report.metrics_saved_usd) <= 5e-7 + 1e-12


def test_metric_total_sums_the_matching_samples() -> None:
    text = (
        "# TYPE evermind_gateway_requests_total counter\n"
        'evermind_gateway_requests_total{tenant="a",cache="hit-l1"} 3\n'
        'evermind_gateway_requests_total{tenant="b",cache="hit-l1"} 2\n'
        'evermind_gateway_requests_total{tenant="a",cache="miss"} 7\n'
    )
    assert metric_total(text, "evermind_gateway_requests_total", 'cache="hit-l1"') == 5
    assert metric_total(text, "evermind_gateway_requests_total") == 12


def test_the_demo_puts_the_base_embedder_into_its_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scripts.demo import embedder_into

    from evermind.embedder.shipped import base_bytes, load_embedder_spec

    package = tmp_path / "demo.evermind"
    package.write_bytes(_package(30))
    assert embedder_into(package) == "the base embedder"
    said = capsys.readouterr().out
    assert "30,522 WordPiece tokens x 256 dims, int8, 8.4 MB" in said, said
    model = evermind.load(package)
    assert model.package.static_embedder is not None
    assert model.package.static_embedder.data == base_bytes()
    texts = ["which editor does Niamh use?", "Niamh writes code in Helix."]
    np.testing.assert_array_equal(model.embed(texts), load_embedder_spec("base").embed(texts))
    # The language model is the one trained: same logits as before the embedder went in.
    before = _model(30)
    ids = np.array([before.tokenizer.encode(texts[0])])
    np.testing.assert_array_equal(model.cpu.forward(ids), before.cpu.forward(ids))
