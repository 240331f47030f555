"""The verified decision (evermind.cache.verified), the pair verifier and what a self-checking
cache learns: each rule of the module docstring, on small hand-made cases."""

from __future__ import annotations

import math
import random
import zlib

import pytest

from evermind.cache import SemanticCache
from evermind.cache.decide import Candidate, Decision, fold
from evermind.cache.verified import (
    DEFAULT_MAX_ERROR,
    MIN_HIT_CHECKS,
    Verification,
    answers_equivalent,
    decide_verified,
    parse_max_error,
)
from evermind.cache.verifier import PairVerifier, default_verifier, pair_features
from evermind.errors import ConfigError
from evermind.search.calibration import Calibration

CALIBRATED = Calibration(threshold=0.5, unrelated=0.4, pairs=100)


def _verifier(weight: float = 0.0) -> PairVerifier:
    """A verifier whose probability is sigmoid(bias + 10·score): a pure function of the score."""
    return PairVerifier({"bias": -5.0 + weight, "score": 10.0}, {"0.01": 0.9, "0.05": 0.7})


def _decide(query: str, candidates: list[Candidate], delta: float, **options: object) -> Decision:
    options.setdefault("verifier", _verifier())
    return decide_verified(
        query,
        candidates,
        calibration=CALIBRATED,
        max_error=delta,
        **options,  # type: ignore[arg-type]
    )


def test_exact_text_wins_whatever_the_verifier_says() -> None:
    found = decide_verified(
        "How do I  list files?",
        [Candidate(1, 0.2, "how do i list files?", "a")],
        calibration=CALIBRATED,
        verifier=_verifier(-100.0),
        max_error=0.01,
    )
    assert found.hit and found.probability == 1.0


def test_a_candidate_below_unrelated_texts_is_never_judged() -> None:
    found = decide_verified(
        "q",
        [Candidate(1, 0.39, "other", "a")],
        calibration=CALIBRATED,
        verifier=_verifier(),
        max_error=0.05,
    )
    assert not found.hit and found.candidate is None and "above unrelated" in found.reason


def test_the_bound_of_the_tightest_shipped_delta_applies() -> None:
    verifier = _verifier()
    # score 0.94 -> normalised 0.9 -> p = sigmoid(4) = 0.982; 0.76 -> 0.6 -> p = 0.731.
    high, low = Candidate(1, 0.94, "alpha", "a"), Candidate(1, 0.76, "alpha", "a")
    for delta, cand, hit in ((0.01, high, True), (0.01, low, False), (0.05, low, True)):
        found = decide_verified(
            "beta", [cand], calibration=CALIBRATED, verifier=verifier, max_error=delta
        )
        assert found.hit is hit, (delta, cand, found.reason)
    assert verifier.threshold(0.02) == 0.9  # between shipped deltas: the stricter one
    assert math.isinf(verifier.threshold(0.001))  # below every shipped delta: exact repeats only
    with pytest.raises(ConfigError, match="max_error"):
        verifier.threshold(1.5)


def test_an_entry_verified_wrong_needs_more_than_its_mismatch() -> None:
    cand = Candidate(7, 0.94, "alpha", "a", contested=0.99)
    found = decide_verified(
        "beta", [cand], calibration=CALIBRATED, verifier=_verifier(), max_error=0.05
    )
    assert not found.hit and found.refused_by == "contested"


def test_a_passing_runner_up_with_another_answer_makes_it_a_miss() -> None:
    best, rival = Candidate(1, 0.95, "alpha", "a"), Candidate(2, 0.94, "gamma", "b")
    found = decide_verified(
        "beta", [best, rival], calibration=CALIBRATED, verifier=_verifier(), max_error=0.05
    )
    assert not found.hit and found.refused_by == "ambiguous"
    same = Candidate(2, 0.94, "gamma", "a")  # the same answer: nothing to guess between
    assert decide_verified(
        "beta", [best, same], calibration=CALIBRATED, verifier=_verifier(), max_error=0.05
    ).hit


def test_the_learned_threshold_replaces_the_shipped_one_once_the_sample_bounds_delta() -> None:
    learned = Verification(0.05, sample_rate=1.0, seed=0)
    assert learned.threshold() is None  # nothing sampled: the shipped bound applies
    for i in range(200):  # 200 sampled lookups, all right at p 0.8 and above
        learned.record(0.8 + 0.001 * (i % 100), True, i, sampled=True)
    assert learned.threshold() == pytest.approx(0.8)
    found = decide_verified(
        "beta",
        [Candidate(1, 0.82, "alpha", "a")],  # p = sigmoid(-5 + 7) = 0.88, under the shipped 0.9
        calibration=CALIBRATED,
        verifier=_verifier(),
        max_error=0.05,
        learned=learned,
    )
    assert found.hit and "learned from 200" in found.reason


def test_a_sample_that_cannot_hold_delta_serves_only_exact_repeats() -> None:
    learned = Verification(0.05, sample_rate=1.0)
    for i in range(100):
        learned.record(0.99, i % 2 == 0, i, sampled=True)  # half of the confident ones wrong
    assert learned.threshold() == math.inf
    assert learned.contested(1) == 0.99 and learned.contested(2) is None
    learned.forget(1)
    assert learned.contested(1) is None


def test_unsampled_checks_mark_entries_but_never_bias_the_bound() -> None:
    learned = Verification(0.05, sample_rate=0.0)
    learned.record(0.7, False, "entry", sampled=False)
    assert learned.contested("entry") == 0.7 and learned.sampled == 0 and learned.mismatches == 1
    assert learned.draw() is False


def test_would_be_hits_are_checked_until_the_checks_bound_the_served_error() -> None:
    learned = Verification(0.01, sample_rate=0.0)
    assert learned.must_check()  # nothing known: every would-be hit is checked
    assert learned.served_bound() == 1.0
    for i in range(2000):  # 1 in 20 lookups a would-be hit, every one checked and right
        guess = i % 20 == 0
        learned.looked_up(guess)
        if guess:
            learned.record(0.9, True, i, sampled=False, paid=True, guess=True, forced=True)
    # h ≤ ~6.6% and q ≤ ~3.6% (100 right of 100) at 97.5% each: the product is under δ.
    assert not learned.must_check()
    assert learned.served_bound() <= 0.01
    assert learned.forced == 100 and learned.paid == 100
    for i in range(20):  # then 20 checked would-be hits prove wrong: check everything again
        learned.looked_up(True)
        learned.record(0.95, False, f"w{i}", sampled=True, paid=True, guess=True)
    assert learned.must_check()
    assert learned.served_bound() > 0.01


def test_the_cheap_decision_agrees_with_the_bound_it_stands_for() -> None:
    rng = random.Random(5)
    for _ in range(200):
        learned = Verification(rng.choice([0.01, 0.05]), sample_rate=0.0)
        lookups, share, wrong = rng.randint(0, 3000), rng.random() * 0.3, rng.random() * 0.1
        checks = 0
        for _ in range(lookups):
            guess = rng.random() < share
            learned.looked_up(guess)
            if guess:
                checks += 1
                learned.record(0.9, rng.random() >= wrong, None, sampled=False, guess=True)
        bound = learned.served_bound()
        if abs(bound - learned.max_error) > 1e-6:
            expected = bound > learned.max_error or checks < MIN_HIT_CHECKS
            assert learned.must_check() == expected, (lookups, bound, checks)


def test_few_would_be_hits_alone_never_leave_the_checking_mode() -> None:
    learned = Verification(0.05, sample_rate=0.0)
    for _ in range(1900):  # no would-be hit at all: h's bound alone is under δ
        learned.looked_up(False)
    assert learned.served_bound() < 0.05
    assert learned.must_check()  # but not one would-be hit was checked yet
    for i in range(10):
        learned.looked_up(True)
        learned.record(0.9, True, i, sampled=False, paid=True, guess=True, forced=True)
    assert not learned.must_check()


def test_one_tenants_traffic_cannot_loosen_anothers_bound() -> None:
    learned = Verification(0.01, sample_rate=0.0)
    for i in range(40):  # tenant b: would-be hits checked, a third of them wrong
        learned.looked_up(True, "b")
        learned.record(0.9, i % 3 != 0, i, sampled=False, paid=True, guess=True, scope="b")
    for i in range(2000):  # tenant a floods with exact repeats and a few right hits
        guess = i % 100 == 0
        learned.looked_up(guess, "a")
        if guess:
            learned.record(0.9, True, i, sampled=False, paid=True, guess=True, scope="a")
    assert not learned.must_check("a")
    assert learned.must_check("b")  # a's traffic did not dilute b's share of would-be hits
    assert learned.served_bound("b") > 0.01 >= learned.served_bound("a")
    assert learned.served_bound() == learned.served_bound("b")  # the worst scope
    assert learned.must_check("c")  # a scope never seen knows nothing yet


def test_without_until_bounded_only_the_sample_is_checked() -> None:
    learned = Verification(0.01, sample_rate=0.0, until_bounded=False)
    learned.looked_up(True)
    assert not learned.must_check()
    gauges = learned.gauges()
    assert gauges["evermind_gateway_cache_forced_checks_total"] == 0
    assert gauges["evermind_gateway_cache_served_error_bound"] == 1.0


def test_answers_equivalent_is_strict_about_numbers_and_short_answers() -> None:
    assert answers_equivalent("Port 5432.", "  port 5432. ")
    assert not answers_equivalent("5432", "6432")
    long = "Use the ss command with the listening flag and grep for the port you want to see now"
    assert answers_equivalent(long, long.replace("now", "today"))
    assert not answers_equivalent(long + " 80", long + " 8080")


def test_pair_features_are_symmetric_and_see_a_swapped_order() -> None:
    a, b = "copy a file from the laptop to the server", "copy a file from the server to the laptop"
    assert pair_features(a, b, 0.9) == pair_features(b, a, 0.9)
    assert dict(pair_features(a, b, 0.9))["reordered"] == 1.0


def test_conflicting_numbers_are_one_feature_and_one_edit_bucket() -> None:
    # Each side names a number the other does not: a conflict. Spelling a number out, or
    # naming it twice, is not one (paraphrases do both).
    conflict = dict(pair_features("what is 15 percent of 80?", "what is 15 percent of 90?", 1.0))
    assert conflict["numbers_conflict"] == 1.0
    spelled = dict(pair_features("scale to 5 replicas", "scale to five replicas", 1.0))
    assert spelled["numbers_conflict"] == 0.0 and spelled["numbers_one_side"] == 1.0
    repeated = dict(pair_features("python 3.9: is 3.9 too old?", "is python 3.9 too old", 1.0))
    assert repeated["numbers_conflict"] == 0.0 and repeated["numbers_differ"] == 1.0
    # Which digits changed does not pick the bucket: every number is one edited "word".
    one = {k for k, v in pair_features("number 300144 means?", "number 100056 means?", 1.0) if v}
    other = {k for k, v in pair_features("number 15681 means?", "number 68579 means?", 1.0) if v}
    assert {k for k in one if k.startswith("edit:")} == {k for k in other if k.startswith("edit:")}


def test_two_questions_that_differ_only_by_their_numbers_are_not_served() -> None:
    # The gateway's overhead probes ("what does the number 15681 mean?") differ only in their
    # numbers; the model-free embedder drops numbers, so every pair of them scores 1.0. The
    # shipped verifier must not serve one's answer for the other at the default δ.
    shipped = default_verifier()
    need = shipped.threshold(0.01)
    pairs = [
        ("Overhead probe 300144: what does the number 15681 mean?",
         "Overhead probe 100056: what does the number 68579 mean?"),
        ("What is 15 percent of 80?", "What is 15 percent of 90?"),
        ("Scale the deployment to 3 replicas", "Scale the deployment to 5 replicas"),
    ]  # fmt: skip
    for query, cached in pairs:
        assert shipped.probability(query, cached, 1.0) < need, (query, cached)


def test_the_shipped_verifier_loads_and_weights_mean_something() -> None:
    shipped = default_verifier()
    assert set(shipped.thresholds) >= {"0.01", "0.05"} and shipped.trained_on
    with pytest.raises(ConfigError, match="feature_version"):
        PairVerifier.from_json({**shipped.to_json(), "feature_version": 0})


def test_the_library_without_checks_says_it_runs_on_the_shipped_bound() -> None:
    with pytest.raises(ConfigError, match="max_error must be a rate"):
        SemanticCache(lambda text: [1.0, 0.0], max_error=0)
    words = [
        "How do I rotate nginx logs daily?",
        "What is the boiling point of water at sea level?",
        "Convert 10 kilometres to miles",
        "Who painted the Mona Lisa?",
        "How to undo the last git commit but keep the changes",
        "Best soil for growing tomatoes in pots",
        "What does a 502 Bad Gateway error mean?",
        "How long should I rest bread dough?",
        "Explain compound interest simply",
    ]

    def embed(text: str) -> list[float]:
        vector = [0.0] * 64
        for word in text.lower().split():
            vector[zlib.crc32(word.encode()) % 64] += 1.0
        return vector

    cache = SemanticCache(embed, max_error=0.01)
    for i, text in enumerate(words):
        cache.store(text, f"answer {i}")
    found = cache.lookup("How do I rotate nginx logs every day?")
    assert found.probability is not None, found.reason  # the verifier judged the candidate
    assert "shipped bound, no verification here" in found.reason
    assert cache.lookup(words[3]).hit  # exact repeats are always served


def test_every_cache_is_verified_at_one_percent_unless_told_otherwise() -> None:
    """Issue 34, one behaviour everywhere: the library's default is the gateway's."""
    cache = SemanticCache(lambda text: [1.0, float(len(text))])
    assert cache.max_error == DEFAULT_MAX_ERROR == 0.01 and cache.verifier is not None
    assert SemanticCache(lambda text: [1.0, 0.0], max_error=None).verifier is None


def test_an_explicit_threshold_only_turns_hits_into_misses() -> None:
    candidate = Candidate(1, 0.95, "How do I list all files?", "a")
    served = _decide("How do I list files?", [candidate], 0.05)
    assert served.hit
    floored = _decide("How do I list files?", [candidate], 0.05, floor=0.97)
    assert not floored.hit and floored.refused_by == "threshold"
    # An exact repeat below the floor is not served either (another embedder's vector).
    exact = _decide("how do i list all files", [candidate], 0.05, floor=0.97)
    assert not exact.hit


@pytest.mark.parametrize(
    ("given", "parsed"), [(0.01, 0.01), ("0.05", 0.05), ("off", None), (" OFF ", None)]
)
def test_max_error_settings_parse(given: object, parsed: float | None) -> None:
    assert parse_max_error(given, "where") == parsed


@pytest.mark.parametrize("given", [0, 1, 1.5, -0.1, True, "abc", None, [0.01]])
def test_bad_max_error_settings_name_what_was_received(given: object) -> None:
    with pytest.raises(ConfigError, match=r"where: max_error must be a rate in \(0, 1\)") as err:
        parse_max_error(given, "where")
    assert repr(given) in str(err.value)


def test_exact_repeats_ignore_case_spaces_and_the_final_question_mark() -> None:
    assert fold("How do I  list files?") == fold("how do i list files") == "how do i list files"
    assert fold("What is 2+2?") != fold("What is 2-2?")
    found = _decide(
        "HOW DO I LIST FILES!",
        [Candidate(1, 0.9, "How do I list files?", "a")],
        0.01,
        verifier=_verifier(-100.0),
    )
    assert found.hit and found.reason == "exact match of a cached query"


def test_a_cache_too_small_to_calibrate_serves_only_exact_repeats() -> None:
    """With fewer stored questions than a calibration needs, a cosine means nothing yet: an
    embedder that puts every pair at 0.99 (a model with no embedding head) served a wrong
    answer here before. Only exact repeats are served until the calibration exists."""
    import random as _random

    from evermind.cache import SemanticCache
    from evermind.search.calibration import MIN_CALIBRATION

    base = [_random.Random(1).gauss(0, 1) for _ in range(32)]

    def collapsed(text: str) -> list[float]:
        rng = _random.Random(zlib.crc32(text.encode()))
        vector = [b + 0.03 * rng.gauss(0, 1) for b in base]
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector]

    questions = [f"How do I configure service number {i} for production?" for i in range(12)]
    cache = SemanticCache(collapsed)
    for n, question in enumerate(questions[: MIN_CALIBRATION - 1], start=1):
        cache.store(question, f"answer {n}")
        found = cache.lookup("What is the capital of Australia?")
        assert found.score is not None and found.score > 0.99  # the embedder cannot tell
        assert not found.hit and found.refused_by == "calibration", found
        assert "only exact repeats" in found.reason
        assert cache.lookup(questions[0].lower()).hit  # an exact repeat (folded) is served
    for question in questions[MIN_CALIBRATION - 1 :]:
        cache.store(question, "another answer")
    found = cache.lookup("What is the capital of Australia?")
    assert not found.hit and found.refused_by == "calibration"
    assert "does not separate texts" in found.reason  # now measured: collapsed
