"""The verifier's fast path (evermind.cache.features.pair_features, PairVerifier.probability)
against its reference (pair_features_ref, probability_ref): the same features bit for bit, the
same probabilities and the same decisions, on every tune-split pair of the corpus and on
random pairs. The shipped weights were trained on the reference, so any difference here would
silently change what the cache serves."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from evals import cache_corpus

from evermind.bridges.caching import TermEmbedder
from evermind.cache.decide import Candidate
from evermind.cache.features import _bucket, clear_caches, pair_features, pair_features_ref
from evermind.cache.verified import decide_verified
from evermind.cache.verifier import PairVerifier, default_verifier
from evermind.search.calibration import measure_calibration
from evermind.text import _fold_token, fold, normalise, token_numbers, token_words, tokenize

SCORES = (-0.3, 0.0, 0.05, 0.4182, 0.731, 0.9, 1.0, 1.2)


class _Reference(PairVerifier):
    """The shipped weights, every probability from the reference path."""

    def probability(self, query: str, cached: str, score: float) -> float:
        return self.probability_ref(query, cached, score)


@pytest.fixture(scope="module")
def tune_pairs() -> list[tuple[str, str]]:
    pairs = [(p.a, p.b) for p in cache_corpus.pairs("tune")]
    assert len(pairs) > 2000  # the whole tune split, not a sample
    return pairs


def _clear() -> None:
    clear_caches()


def test_features_are_the_reference_bit_for_bit_on_every_tune_pair(
    tune_pairs: list[tuple[str, str]],
) -> None:
    _clear()
    differing = []
    for rounds in range(2):  # cold profiles, then every profile from the cache
        for a, b in tune_pairs:
            for score in SCORES[rounds::2]:
                for x, y in ((a, b), (b, a)):
                    if pair_features(x, y, score) != pair_features_ref(x, y, score):
                        differing.append((x, y, score))
    print(f"{len(differing)} of {len(tune_pairs) * len(SCORES) * 2} differ")
    assert not differing[:3]


def _edited(rng: random.Random, text: str, words: list[str]) -> str:
    """``text`` changed the way near-misses and paraphrases change it."""
    tokens = text.split()
    kind = rng.randrange(7)
    if kind == 0 and len(tokens) > 1:
        rng.shuffle(tokens)
    elif kind == 1:
        tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(words))
    elif kind == 2 and tokens:
        tokens[rng.randrange(len(tokens))] = rng.choice(words)
    elif kind == 3:
        return re.sub(r"\d+", lambda m: str(int(m.group()) + rng.randint(1, 9)), text) + " 42"
    elif kind == 4:
        return text.upper().replace("A", "Ａ")  # full-width forms: NFKC changes the text
    elif kind == 5 and len(tokens) > 2:
        del tokens[rng.randrange(len(tokens))]
    else:
        tokens = tokens + tokens[: rng.randrange(len(tokens) + 1)]  # repeated words
    return " ".join(tokens)


def test_features_are_the_reference_bit_for_bit_on_random_pairs(
    tune_pairs: list[tuple[str, str]],
) -> None:
    rng = random.Random(34)
    texts = [t for pair in tune_pairs for t in pair]
    words = sorted({w for t in texts[:400] for w in t.split()})
    odd = ["?", "1 2 3", "1 1 2", "the the the", "a-b c.d e", "v2 vs v3", "３ apples", "ok"]
    pairs = [(rng.choice(texts), rng.choice(texts)) for _ in range(1500)]
    pairs += [(t, _edited(rng, t, words)) for t in rng.sample(texts, 1500)]
    pairs += [(x, y) for x in odd for y in odd]
    _clear()
    for a, b in pairs:
        score = rng.uniform(-0.2, 1.1)
        assert pair_features(a, b, score) == pair_features_ref(a, b, score), (a, b, score)


def test_probability_is_the_reference_and_the_hits_are_the_same(
    tune_pairs: list[tuple[str, str]],
) -> None:
    verifier = default_verifier()
    needs = [verifier.threshold(float(d)) for d in verifier.thresholds]
    _clear()
    worst = 0.0
    for a, b in tune_pairs:
        for score in (0.05, 0.6, 0.95):
            fast, ref = verifier.probability(a, b, score), verifier.probability_ref(a, b, score)
            worst = max(worst, abs(fast - ref))
            assert [fast >= need for need in needs] == [ref >= need for need in needs]
    print(f"largest difference {worst:.3g}")
    assert worst <= 1e-12


def test_decisions_are_the_reference_on_the_tune_split() -> None:
    """What a cache holding the tune split's questions decides for every paraphrase and
    near-miss (top four candidates by the model-free embedder), both ways."""
    triples = cache_corpus.triples("tune")
    stored = list(dict.fromkeys(t.query for t in triples))
    answers = {t.query: t.id for t in triples}
    embed = TermEmbedder()

    def unit(text: str) -> np.ndarray:
        v = np.asarray(embed(text), dtype=np.float64)
        return v / (np.linalg.norm(v) or 1.0)

    matrix = np.stack([unit(q) for q in stored])
    calibration = measure_calibration(
        stored,
        lambda chosen, pairs: [float(matrix[chosen[i]] @ matrix[chosen[j]]) for i, j in pairs],
    )
    fast = default_verifier()
    reference = _Reference(fast.weights, fast.thresholds, fast.trained_on)
    asked = [t.paraphrase for t in triples] + [t.near_miss for t in triples]
    _clear()
    hits = judged = 0
    for text in asked:
        scores = matrix @ unit(text)
        top = np.argsort(-scores, kind="stable")[:4]
        candidates = [
            Candidate(int(i), float(scores[i]), stored[i], answers[stored[i]]) for i in top
        ]
        for delta in (0.01, 0.05):
            options = {"calibration": calibration, "max_error": delta}
            got = decide_verified(text, candidates, verifier=fast, **options)  # type: ignore[arg-type]
            want = decide_verified(text, candidates, verifier=reference, **options)  # type: ignore[arg-type]
            assert (got.hit, got.candidate, got.refused_by) == (
                want.hit,
                want.candidate,
                want.refused_by,
            )
            assert got.reason == want.reason
            assert (got.probability is None) == (want.probability is None)
            if got.probability is not None and want.probability is not None:
                assert abs(got.probability - want.probability) <= 1e-12
                judged += 1
            hits += got.hit
    print(f"{len(asked)} lookups, {judged} judged by the verifier, {hits} hits")
    assert judged > len(asked)  # the verifier decided most lookups at both deltas
    assert hits > 0


def test_edited_words_in_one_bucket_add_up_in_the_reference_order() -> None:
    """Float addition is not associative: three edited words hashed to one bucket must be
    summed in the reference's order (the query's words, then the cached question's)."""
    letters = "bcdfgkmpqvxz"
    by_bucket: dict[int, list[str]] = {}
    for word in (a + b + c for a in letters for b in letters for c in letters):
        by_bucket.setdefault(_bucket(word), []).append(word)
    first, second, third = next(words for words in by_bucket.values() if len(words) >= 3)[:3]
    query, cached = f"{first} {second}", " ".join([third] * 4)
    key = f"edit:{_bucket(first)}"
    assert (0.0 + 1 / 6 + 1 / 6) + 4 / 6 != (0.0 + 4 / 6 + 1 / 6) + 1 / 6  # order shows
    _clear()
    for x, y in ((query, cached), (cached, query)):
        got = dict(pair_features(x, y, 0.5))
        assert pair_features(x, y, 0.5) == pair_features_ref(x, y, 0.5)
        assert got[key] == dict(pair_features_ref(x, y, 0.5))[key]


def test_a_tokens_fold_is_lower_casing_for_ascii_and_fold_otherwise() -> None:
    """tokenize folds each token with text._fold_token: it must equal text.fold everywhere."""
    rng = random.Random(7)
    ascii_texts = [chr(i) for i in range(128)]
    ascii_texts += ["".join(chr(rng.randrange(32, 127)) for _ in range(12)) for _ in range(2000)]
    other = ["Reykjavík", "Straße", "ＡＢＣ１２", "Niamh’s", "ﬁle", "Ǆemal", "İstanbul", "٣٤", "K"]
    for text in ascii_texts + other:
        assert _fold_token(text) == fold(text), text
    tokens = tokenize("Ａpple’s 12ＭＢ and ORA-00942, ½ and 0x1F in Straße")
    assert [t.low for t in tokens] == [fold(t.text) for t in tokens]


def test_token_words_and_numbers_are_tokenizes_fields(tune_pairs: list[tuple[str, str]]) -> None:
    """text.token_words / token_numbers skip building Tokens; they must read the same."""
    rng = random.Random(11)
    alphabet = "aZ9 -._'’,:?!()$%½²３٣ﬁßİ\t0xX1F"
    texts = [t for pair in tune_pairs[:1500] for t in pair]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(30))) for _ in range(3000)]
    texts += ["two-week 9x13 512Mi 1,024.5 3.11.2 0x80070005 ORA-00942 v2 can't", ""]
    for text in texts:
        for form in (text, normalise(text)):
            tokens = tokenize(form)
            assert token_words(form) == [(t.kind, t.low) for t in tokens if t.kind != "symbol"]
            assert token_numbers(form) == [
                t.number for t in tokens if t.kind == "number" and t.number is not None
            ]
