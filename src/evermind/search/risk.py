"""Error bounds for learned decisions: how wrong a rule may be, with a stated confidence.

This module owns the statistics that turn labelled outcomes into a promise:

- :func:`binomial_upper`, the exact one-sided (Clopper–Pearson) upper confidence bound on a
  rate from ``k`` failures in ``n`` trials;
- :func:`bounded_threshold`, the lowest score threshold whose share of wrongly answered
  lookups stays below a target ``δ`` with confidence ``1 − α`` (vCache's error rate,
  Schroeder et al. 2025), chosen by *fixed-sequence testing* (Learn then Test, Angelopoulos
  et al. 2021): thresholds are tested from the strictest down, and the walk stops at the
  first one whose bound exceeds ``δ``. The risk only grows as the threshold falls, and testing
  in a fixed order keeps the family-wise error at most ``α`` without a correction for the
  number of thresholds tried.

The semantic cache uses it twice: offline, on a calibration split, to ship a conservative
threshold per ``δ`` (:mod:`evermind.cache.verifier`), and online, on the verified outcomes
a gateway collects (:mod:`evermind.cache.verified`).

Browser-safe: standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "binomial_upper",
    "bounded_threshold",
    "fewest_outcomes",
    "rate_bounded_below",
    "served_error",
]


def _log_binom_cdf(k: int, n: int, p: float) -> float:
    """log P(X <= k) for X ~ Binomial(n, p), summed in log space."""
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 0.0 if k >= n else -math.inf
    log_p, log_q = math.log(p), math.log1p(-p)
    term = n * log_q  # log P(X = 0); each next term by the ratio (n - i + 1) / i * p / q
    terms = [term]
    for i in range(1, k + 1):
        term += math.log((n - i + 1) / i) + log_p - log_q
        terms.append(term)
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def binomial_upper(failures: int, trials: int, alpha: float = 0.05) -> float:
    """The exact upper ``1 − alpha`` confidence bound on a failure rate.

    Args:
        failures: Failures seen, ``0 <= failures <= trials``.
        trials: Trials seen; with none the bound is 1.0 (nothing is known).
        alpha: One-sided error of the bound, in (0, 1).

    Returns:
        The largest rate ``p`` with ``P(X <= failures | trials, p) >= alpha`` (Clopper–Pearson).

    Raises:
        ValueError: On counts or an alpha out of range.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"binomial_upper: alpha must lie in (0, 1), got {alpha}")
    if trials < 0 or not 0 <= failures <= max(trials, 0):
        raise ValueError(f"binomial_upper: need 0 <= failures <= trials, got {failures}/{trials}")
    if trials == 0 or failures == trials:
        return 1.0
    target = math.log(alpha)
    low, high = failures / trials, 1.0
    for _ in range(45):  # bisection to ~3e-14: the CDF falls monotonically in p
        mid = (low + high) / 2
        if _log_binom_cdf(failures, trials, mid) > target:
            low = mid
        else:
            high = mid
    return high


def rate_bounded_below(failures: int, trials: int, rate: float, alpha: float = 0.05) -> bool:
    """Whether :func:`binomial_upper` of ``failures / trials`` lies at or below ``rate``,
    decided with one CDF sum instead of a bisection: at most ``failures`` in ``trials`` at
    that rate is no likelier than ``alpha``.

    Args:
        failures: Failures seen, ``0 <= failures <= trials``.
        trials: Trials seen; with none nothing is bounded below 1.
        rate: The rate to compare with; at 1 or above it always holds.
        alpha: One-sided error of the bound, in (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"rate_bounded_below: alpha must lie in (0, 1), got {alpha}")
    if trials < 0 or not 0 <= failures <= max(trials, 0):
        raise ValueError(
            f"rate_bounded_below: need 0 <= failures <= trials, got {failures}/{trials}"
        )
    if rate >= 1.0:
        return True
    if trials == 0 or failures == trials or rate <= 0.0:
        return False
    return _log_binom_cdf(failures, trials, rate) <= math.log(alpha)


def fewest_outcomes(max_error: float, alpha: float = 0.05) -> int:
    """The fewest served outcomes, all correct, whose upper bound reaches ``max_error``.

    Args:
        max_error: The bound to reach, δ in (0, 1).
        alpha: One-sided error of the bound.

    Returns:
        ``ceil(ln(alpha) / ln(1 − δ))``: 299 for δ = 0.01, 59 for δ = 0.05 (alpha 0.05).
    """
    if not 0.0 < max_error < 1.0:
        raise ValueError(f"fewest_outcomes: max_error must lie in (0, 1), got {max_error}")
    return math.ceil(math.log(alpha) / math.log1p(-max_error))


def served_error(
    scores: Sequence[float], correct: Sequence[bool], threshold: float
) -> tuple[int, int]:
    """How many outcomes a threshold serves, and how many of those were wrong.

    Args:
        scores: One score per labelled outcome.
        correct: Whether serving that outcome was right.
        threshold: Scores at or above it are served.

    Returns:
        ``(wrong, served)``.
    """
    wrong = served = 0
    for score, ok in zip(scores, correct, strict=True):
        if score >= threshold:
            served += 1
            wrong += not ok
    return wrong, served


def bounded_threshold(
    scores: Sequence[float],
    correct: Sequence[bool],
    max_error: float,
    *,
    lookups: int | None = None,
    alpha: float = 0.05,
) -> float | None:
    """The lowest threshold whose wrong answers stay within ``max_error`` of the lookups.

    The risk is vCache's error rate: the share of *lookups* answered wrongly (served, and
    wrong). Serving more never lowers it, so thresholds are tested from the highest down
    (fixed-sequence testing, Learn then Test) and the walk stops at the first one whose
    Clopper–Pearson upper bound on ``wrong / lookups`` exceeds ``max_error``; the answer
    then holds with confidence ``1 − alpha`` for lookups drawn like these.

    Args:
        scores: The score of each lookup's best candidate (higher = more likely right).
        correct: Whether serving that candidate was right.
        max_error: δ, the share of lookups the caller accepts being answered wrongly, in (0, 1).
        lookups: How many lookups the outcomes come from (lookups without a candidate can
            never be answered wrongly); default ``len(scores)``.
        alpha: One-sided error of each bound.

    Returns:
        The threshold, or None when not even the strictest one holds the bound (too few
        lookups: at least :func:`fewest_outcomes` are needed; or a wrong one at the top).

    Raises:
        ValueError: On mismatched lengths, too few lookups or a ``max_error`` out of range.
    """
    if len(scores) != len(correct):
        raise ValueError(f"bounded_threshold: {len(scores)} scores but {len(correct)} labels")
    if not 0.0 < max_error < 1.0:
        raise ValueError(f"bounded_threshold: max_error must lie in (0, 1), got {max_error}")
    total = len(scores) if lookups is None else lookups
    if total < len(scores):
        raise ValueError(f"bounded_threshold: {total} lookups cannot hold {len(scores)} outcomes")
    if total == 0:
        return None
    order = sorted(zip(scores, correct, strict=True), key=lambda pair: -pair[0])
    allowed = _most_wrong(total, max_error, alpha)
    best: float | None = None
    wrong = 0
    index = 0
    while index < len(order):
        threshold = order[index][0]
        while index < len(order) and order[index][0] == threshold:  # ties are served together
            wrong += not order[index][1]
            index += 1
        if wrong > allowed:
            break
        best = threshold
    return best


def _most_wrong(lookups: int, max_error: float, alpha: float) -> int:
    """The most wrong answers among ``lookups`` whose upper bound stays <= ``max_error``
    (-1 when even none does: too few lookups)."""
    if binomial_upper(0, lookups, alpha) > max_error:
        return -1
    low, high = 0, lookups  # the bound rises with the failures: binary search the last pass
    while high - low > 1:
        mid = (low + high) // 2
        if binomial_upper(mid, lookups, alpha) <= max_error:
            low = mid
        else:
            high = mid
    return low
