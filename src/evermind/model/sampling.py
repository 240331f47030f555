"""The one next-token sampler: greedy, temperature, top-k, top-p (browser-safe, standard library).

Both decoders use it: :class:`evermind.model.gpu_infer.GpuDecoder` in the tab and
:class:`evermind.model.inference.Model` natively (on ``CpuMamba``'s logits), so a seed means the
same thing on both and the tab needs no numpy.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence

__all__ = ["sample"]


def sample(
    logits: Sequence[float],
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    rng: random.Random,
) -> int:
    """Samples a token id from ``logits`` (V,).

    Args:
        logits: One score per vocabulary entry.
        temperature: 0 (or below) is greedy (the highest logit, lowest id on ties); otherwise
            the scores are divided by it before the softmax.
        top_k: Keep only the k highest scores; None or <= 0 keeps all.
        top_p: Keep the smallest set of the most likely tokens whose probabilities reach
            ``top_p`` (nucleus sampling); None or >= 1 keeps all.
        rng: The random source (seeded for reproducible draws).
    """
    if temperature <= 0:
        return max(range(len(logits)), key=logits.__getitem__)
    k = len(logits) if not top_k or top_k <= 0 else min(top_k, len(logits))
    best = heapq.nlargest(k, range(len(logits)), key=logits.__getitem__)  # descending
    top = logits[best[0]]
    weights = [math.exp((logits[i] - top) / temperature) for i in best]  # max 1: no overflow
    total = sum(weights)
    probs = [w / total for w in weights]
    if top_p is not None and top_p < 1:
        cumulative, cut = 0.0, len(probs)
        for index, prob in enumerate(probs):
            cumulative += prob
            if cumulative >= top_p:
                cut = index + 1
                break
        best, probs = best[:cut], probs[:cut]
    return rng.choices(best, weights=probs, k=1)[0]
