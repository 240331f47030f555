"""Error bounds (evermind.search.risk): exact binomial bounds and the fixed-sequence threshold."""

from __future__ import annotations

import random

import pytest

from evermind.search.risk import binomial_upper, bounded_threshold, fewest_outcomes, served_error


def test_binomial_upper_matches_known_clopper_pearson_values() -> None:
    # Zero failures: the bound is 1 - alpha^(1/n) in closed form.
    for n in (1, 10, 59, 299, 1000):
        assert binomial_upper(0, n) == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-9)
    # 3 of 100 at 95% one-sided: 0.0757 (the tabulated Clopper-Pearson value).
    assert binomial_upper(3, 100) == pytest.approx(0.0757, abs=5e-4)
    assert binomial_upper(5, 5) == 1.0
    assert binomial_upper(0, 0) == 1.0


def test_binomial_upper_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="failures <= trials"):
        binomial_upper(4, 3)
    with pytest.raises(ValueError, match="alpha"):
        binomial_upper(0, 3, alpha=1.5)


def test_fewest_outcomes_is_where_a_clean_record_first_passes() -> None:
    for delta in (0.01, 0.05, 0.1):
        n = fewest_outcomes(delta)
        assert binomial_upper(0, n) <= delta < binomial_upper(0, n - 1)


def test_bounded_threshold_holds_its_error_on_fresh_draws() -> None:
    """Fit on one sample, check the population: the share of wrongly answered lookups above
    the chosen threshold exceeds delta far less often than alpha allows."""

    def draw(rng: random.Random, n: int) -> tuple[list[float], list[bool]]:
        scores = [rng.random() for _ in range(n)]
        return scores, [rng.random() < s for s in scores]  # P(right | s) = s

    rng = random.Random(7)
    delta = 0.05
    exceeded = 0
    for _ in range(20):
        scores, ok = draw(rng, 3000)
        thr = bounded_threshold(scores, ok, delta)
        assert thr is not None
        # The population's wrong share: the integral of (1 - s) over [thr, 1].
        true_error = (1 - thr) ** 2 / 2
        exceeded += true_error > delta
        assert true_error > delta / 2  # and it is not needlessly strict
    assert exceeded <= 3  # alpha = 0.05 of 20 is 1; allow sampling slack


def test_bounded_threshold_counts_lookups_without_a_candidate() -> None:
    scores, ok = [0.9] * 40 + [0.5] * 40, [True] * 40 + [False] * 40
    assert bounded_threshold(scores, ok, 0.05) == 0.9  # 40 wrong of 80 lookups: too many
    # Among 4,000 lookups (the rest found no candidate), 40 wrong answers are 1%.
    assert bounded_threshold(scores, ok, 0.05, lookups=4000) == 0.5
    with pytest.raises(ValueError, match="cannot hold"):
        bounded_threshold(scores, ok, 0.05, lookups=10)


def test_bounded_threshold_gives_up_when_the_top_is_wrong_or_lookups_are_few() -> None:
    scores = [0.99, 0.98, 0.97] + [0.5] * 400
    ok = [False, False, False] + [True] * 400
    assert bounded_threshold(scores, ok, 0.005) is None
    assert bounded_threshold([0.9] * 10, [True] * 10, 0.01) is None  # 10 < 299 lookups


def test_served_error_counts_at_and_above_the_threshold() -> None:
    assert served_error([0.2, 0.5, 0.9], [True, False, True], 0.5) == (1, 2)


def test_rate_bounded_below_agrees_with_the_bisected_bound() -> None:
    import random

    from evermind.search.risk import rate_bounded_below

    rng = random.Random(11)
    for _ in range(500):
        trials = rng.randint(1, 400)
        failures = rng.randint(0, trials)
        rate, alpha = rng.random(), rng.choice([0.025, 0.05])
        upper = binomial_upper(failures, trials, alpha)
        if abs(upper - rate) > 1e-9:
            assert rate_bounded_below(failures, trials, rate, alpha) == (upper <= rate)
    assert rate_bounded_below(3, 10, 1.0) and not rate_bounded_below(0, 0, 0.5)
    with pytest.raises(ValueError, match="failures <= trials"):
        rate_bounded_below(5, 3, 0.5)
