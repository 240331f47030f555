"""The full-cache safety property: one cache holding every stored query, whatever the embedder.

Every stored query of the development set (``cache_pairs_dev.jsonl``, found like
``evals/__init__.py`` finds it; a synthetic set of the same shape when it is absent) goes
into ONE :class:`SemanticCache`; every paraphrase and near-miss is looked up through the real
``lookup`` (``evals.cache_full.measure``). With a collapsed embedder and with a freshly
trained nano model no wrong answer may be served, and near-miss hits stay at or under 2%.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from evals.cache_full import collapsed_vector, measure

import evermind
from evermind.cache import Refusal, SemanticCache
from evermind.cache.decide import Candidate, decide, lexical_evidence
from evermind.memory import InMemoryBackend, MemoryStore
from evermind.search.calibration import calibrate
from evermind.studio.tab_memory import trigram_vector
from tests.factories import tiny_package

ROOT = Path(__file__).resolve().parents[2]


def _dev_rows() -> list[dict[str, Any]]:
    folder = Path(os.environ.get("EVERMIND_EVAL_DIR") or ROOT.parent / "shared" / "eval")
    path = folder / "cache_pairs_dev.jsonl"
    if path.is_file():
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
    return _synthetic_rows()


def _synthetic_rows() -> list[dict[str, Any]]:
    """282 triples shaped like the dev set: paraphrase rewords, near-miss changes one thing."""
    things = ["Docker volume", "git branch", "S3 bucket", "Postgres index", "Kafka topic",
              "cron job", "DNS record", "Redis key", "npm package", "SSH key", "VPN profile",
              "Slack channel", "Jira ticket", "TLS certificate", "Helm chart", "user account",
              "Excel macro", "Python venv", "firewall rule", "calendar invite"]  # fmt: skip
    ops = [("delete", "remove", "create"), ("rename", "change the name of", "copy"),
           ("back up", "make a backup of", "restore"), ("list", "show all", "count")]  # fmt: skip
    places = ["on Linux", "on Windows", "in production", "from the CLI"]
    rows: list[dict[str, Any]] = []
    for n, (thing, (op, para_op, other_op), place) in enumerate(
        (t, o, p) for t in things for o in ops for p in places[:4]
    ):
        if len(rows) == 282:
            break
        rows.append(
            {
                "id": f"cd{n + 1:03d}",
                "query": f"How do I {op} a {thing} {place}?",
                "paraphrase": f"What is the way to {para_op} a {thing} {place}?",
                "near_miss": f"How do I {other_op} a {thing} {place}?",
            }
        )
    return rows


ROWS = _dev_rows()
SYNTHETIC = not ROWS[0]["query"] or "domain" not in ROWS[0]


def _collapsed(texts: list[str]) -> list[list[float]]:
    return [collapsed_vector(t) for t in texts]


def test_full_cache_with_a_collapsed_embedder_serves_no_wrong_answer() -> None:
    report = measure(ROWS, _collapsed, "collapsed")
    result = report["splits"]["all"]
    assert report["entries"] == len(ROWS)
    assert result["wrong"] == 0.0
    assert result["near_miss_hit"] <= 0.02
    assert "does not separate texts" in report["calibration"]


def test_full_cache_with_a_trained_nano_model_serves_no_wrong_answer() -> None:
    model = evermind.load(tiny_package("nano-safety", "0.1.0", steps=60))
    report = measure(ROWS, lambda batch: model.embed(batch), "nano")
    result = report["splits"]["all"]
    assert result["wrong"] == 0.0
    assert result["near_miss_hit"] <= 0.02


def test_full_cache_with_trigrams_still_serves_paraphrases_and_few_near_misses() -> None:
    report = measure(ROWS, lambda b: [trigram_vector(t) for t in b], "trigram", max_error=None)
    result = report["splits"]["all"]
    if not SYNTHETIC:  # templated queries resemble each other: the calibration is strict
        # A real (lexical) embedder stays useful. 0.29, not 0.30: the soft action guard
        # (evermind.cache.english.guards.ACTION_CONFIDENT), which took the terms embedder's
        # wrong answers to 0, costs trigrams one paraphrase of 282 (0.301 -> 0.298).
        assert result["paraphrase_hit"] >= 0.29
    assert result["near_miss_hit"] <= 0.02
    # Trigrams are a weak embedder: the IDF-weighted lexical evidence (and the longer query's
    # share) keeps their wrong answers at the target on the dev set; see evals/cache_full.py.
    assert result["wrong"] <= (0.05 if SYNTHETIC else 0.01)


def _full_trigram_cache() -> SemanticCache:
    cache = SemanticCache(
        lambda t: trigram_vector(t), fingerprint="trigram", capacity=10_000, max_error=None
    )
    for row in ROWS:
        cache.store(row["query"], row["id"])
    return cache


def test_an_unrelated_question_is_refused_with_a_reason() -> None:
    cache = _full_trigram_cache()
    found = cache.lookup("What is your favourite pizza topping for a rainy evening?")
    assert not found.hit and found.response is None
    assert found.reason
    assert found.threshold is not None and found.threshold >= cache.calibration.threshold  # type: ignore[operator]


def test_an_explicit_low_threshold_is_raised_to_the_calibration() -> None:
    cache = SemanticCache(
        lambda t: trigram_vector(t), threshold=0.05, fingerprint="trigram", max_error=None
    )
    for row in ROWS[:40]:
        cache.store(row["query"], row["id"])
    assert cache.calibration.threshold is not None
    assert cache.effective_threshold == cache.calibration.threshold > 0.05
    found = cache.lookup("Completely different words about knitting wool socks")
    assert not found.hit and "raised" in found.reason


def test_the_best_refused_candidate_is_a_miss_and_near_ties_are_ambiguous() -> None:
    calibration = calibrate([0.1] * 40)
    cands = [
        Candidate("a", 0.95, "How do I create a Docker volume?", "create"),
        Candidate("b", 0.94, "How do I delete a Docker volume?", "delete"),
    ]

    def guard(query: str, cached: str) -> Refusal | None:
        return None if "delete" in cached else Refusal("operation", "'delete' vs 'create'")

    refused = decide(
        "How do I delete a Docker volume now?",
        cands,
        threshold=None,
        calibration=calibration,
        guard=guard,
    )
    assert not refused.hit and refused.refused_by == "operation"
    tied = [
        Candidate("a", 0.950, "Docker volume size limits on Linux", "one"),
        Candidate("b", 0.945, "Docker volume size limits on macOS", "two"),
    ]
    found = decide("docker volume size limits", tied, threshold=None, calibration=calibration,
                   guard=None)  # fmt: skip
    assert not found.hit and found.refused_by == "ambiguous"
    same = [Candidate("a", 0.95, tied[0].query, "one"), Candidate("b", 0.945, tied[1].query, "one")]
    assert decide("docker volume size limits", same, threshold=None, calibration=calibration,
                  guard=None).hit  # fmt: skip


def test_lexical_evidence_needs_shared_content_words() -> None:
    assert lexical_evidence("How do I delete a Docker volume?", "Remove a docker volume") is None
    assert lexical_evidence("How many people live in Iceland?", "How many grams in a cup?")
    assert lexical_evidence("the and of", "Docker volume")


class _Collapsed:
    fingerprint = "collapsed"

    async def embed(self, texts: list[str]) -> Sequence[Sequence[float]]:
        return [collapsed_vector(t) for t in texts]


def test_recall_of_an_unrelated_query_returns_nothing() -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        store = MemoryStore(InMemoryBackend(), _Collapsed())
        rnd = random.Random(0)
        words = ["route", "solver", "depot", "fleet", "invoice", "deploy", "ticket", "host"]
        for n in range(20):
            picked = " ".join(rnd.sample(words, 3))
            await store.remember(f"m{n}", f"Fact {n}: the {picked} note {zlib.crc32(bytes(n))}")
        unrelated = await store.recall("favourite pizza topping", 5)
        related = await store.recall("which depot does the fleet use", 5)
        await store.close()
        return unrelated, related

    unrelated, related = asyncio.run(scenario())
    assert unrelated == []
    assert related  # a query sharing words still recalls


@pytest.mark.parametrize("score", [0.2, 0.999])
def test_a_collapsed_calibration_never_serves(score: float) -> None:
    calibration = calibrate([0.998] * 40)
    assert calibration.collapsed
    cands = [Candidate("a", score, "Docker volume size", "x")]
    found = decide("docker volume size limit", cands, threshold=None, calibration=calibration,
                   guard=None)  # fmt: skip
    assert not found.hit
