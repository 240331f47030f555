"""What a cosine between two texts means for *this* embedder, in words (browser-safe).

The Studio's Compare button shows a cosine. A fixed cut-off cannot say what it means: a
centred 20-step model may score unrelated sentences anywhere up to 0.8, a distilled one
rarely above 0.3. So the verdict places the cosine among the embedder's own cosines of
unrelated corpus sentence pairs (those the cache's calibration measures:
:func:`~evermind.search.calibration.measure_calibration`):

- ``similar``: at or above the cache's threshold (the unrelated 99 % quantile plus margin);
- ``related``: above the unrelated 99 % quantile, below the threshold;
- ``unclear``: within the range unrelated pairs reach, above their median: the score does
  not show the texts are related, nor that they are not;
- ``unrelated``: at or below the unrelated pairs' median: it scores like unrelated texts;
- ``collapsed`` / ``uncalibrated``: the calibration says nothing (an embedder that scores
  everything alike, or too few corpus sentences).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from evermind.search.calibration import QUANTILE, Calibration, quantile


def share_at_or_above(ordered: Sequence[float], score: float) -> float:
    """The fraction of ascending, non-empty ``ordered`` at or above ``score``."""
    return (len(ordered) - bisect_left(ordered, score)) / len(ordered)


def similarity_meaning(
    cosine: float, calibration: Calibration, unrelated_scores: Sequence[float]
) -> dict[str, Any]:
    """The verdict on ``cosine`` and its words, from the embedder's unrelated-pair scores.

    Args:
        cosine: The two texts' cosine.
        calibration: The calibration measured on ``unrelated_scores``.
        unrelated_scores: Ascending cosines of the unrelated pairs it was measured on.

    Returns:
        ``{verdict, words, median, share}``: ``median`` of the unrelated scores and
        ``share``, the fraction of unrelated pairs scoring at least ``cosine`` (None for
        ``collapsed`` and ``uncalibrated``).
    """
    threshold, unrelated = calibration.threshold, calibration.unrelated
    if calibration.collapsed:
        return {
            "verdict": "collapsed",
            "median": None,
            "share": None,
            "words": f"This embedder does not separate texts yet ({calibration.words}), so the "
            "score says little; train longer or run the embedder phase.",
        }
    if threshold is None or unrelated is None or not unrelated_scores:
        return {
            "verdict": "uncalibrated",
            "median": None,
            "share": None,
            "words": f"Not calibrated ({calibration.words}): add more corpus text to measure "
            "what unrelated texts score.",
        }
    median = quantile(unrelated_scores, 0.5)
    share = share_at_or_above(unrelated_scores, cosine)
    cache = f"a cache hit needs {threshold:.3f}"
    if cosine >= threshold:
        verdict, head = "similar", f"Similar: at or above the {threshold:.3f} a cache hit needs"
    elif cosine > unrelated:
        verdict, head = (
            "related",
            f"Related: higher than {QUANTILE:.0%} of unrelated corpus sentence pairs "
            f"(they reach {unrelated:.3f}), below the {threshold:.3f} a cache hit needs",
        )
    elif cosine > median:
        verdict, head = (
            "unclear",
            f"Can't tell: {share:.0%} of unrelated corpus sentence pairs score this high, so "
            f"for this embedder the score does not show the texts are related or unrelated "
            f"(unrelated pairs: median {median:.3f}, {QUANTILE:.0%} up to {unrelated:.3f}; "
            f"{cache})",
        )
    else:
        verdict, head = (
            "unrelated",
            f"Scores like unrelated texts: at or below the median of unrelated corpus "
            f"sentence pairs ({median:.3f}; {share:.0%} of them score this high; {cache})",
        )
    words = (
        f"{head}. Calibrated on {calibration.pairs:,} pairs of corpus sentences that share no word."
    )
    return {"verdict": verdict, "median": median, "share": share, "words": words}
