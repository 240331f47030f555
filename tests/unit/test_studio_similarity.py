"""The Compare verdict places a cosine among the embedder's own unrelated-pair scores."""

from __future__ import annotations

import pytest

from evermind.search.calibration import UNCALIBRATED, calibrate
from evermind.studio.similarity import share_at_or_above, similarity_meaning

# A weak embedder: unrelated sentence pairs score anywhere from 0.30 to 0.85.
WEAK = sorted(0.30 + 0.55 * i / 199 for i in range(200))
# A sharp one: unrelated pairs score from -0.10 to 0.25.
SHARP = sorted(-0.10 + 0.35 * i / 199 for i in range(200))


@pytest.mark.parametrize(
    ("scores", "cosine", "verdict"),
    [
        (WEAK, 0.72, "unclear"),  # issue 39: two paraphrases at 0.72 were called "Unrelated"
        (WEAK, 0.45, "unrelated"),
        (WEAK, 0.86, "related"),
        (WEAK, 0.95, "similar"),
        (SHARP, 0.72, "similar"),  # the same cosine means something else for another embedder
        (SHARP, 0.20, "unclear"),
        (SHARP, 0.05, "unrelated"),
    ],
)
def test_the_verdict_depends_on_the_embedders_own_unrelated_scores(
    scores: list[float], cosine: float, verdict: str
) -> None:
    calibration = calibrate(scores)
    meaning = similarity_meaning(cosine, calibration, scores)
    print(cosine, calibration.words, meaning)
    assert meaning["verdict"] == verdict
    assert meaning["share"] == share_at_or_above(scores, cosine)
    assert "a cache hit needs" in meaning["words"]
    if verdict == "unrelated":
        assert cosine <= meaning["median"]


def test_no_verdict_without_a_calibration_or_from_a_collapsed_embedder() -> None:
    assert similarity_meaning(0.5, UNCALIBRATED, [])["verdict"] == "uncalibrated"
    collapsed = [0.99] * 50
    assert similarity_meaning(0.99, calibrate(collapsed), collapsed)["verdict"] == "collapsed"


def test_share_at_or_above() -> None:
    assert share_at_or_above([0.1, 0.2, 0.3, 0.4], 0.3) == 0.5
    assert share_at_or_above([0.1, 0.2], 0.9) == 0.0
    assert share_at_or_above([0.1, 0.2], -1.0) == 1.0
