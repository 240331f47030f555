"""The one next-token sampler: greedy, temperature, top-k, top-p (browser-safe, standard library).

Both decoders use it: :class:`evermind.model.gpu_infer.GpuDecoder` in the tab and
:class:`evermind.model.inference.Model` natively (on ``CpuMamba``'s logits), so a seed means the
same thing on both and the tab needs no numpy. The tab's two one-sequence decoders (the GPU's
and :class:`evermind.model.py_decode.PyDecoder`, without WebGPU) generate through the one loop
:func:`stream_tokens` around it. The native runtime's batched form,
:func:`evermind.model.sampling_rows.sample_rows`, draws the same tokens for the same uniforms
(it falls back to :func:`sample_uniform` for a row whose draw its float rounding could change).

A draw is one uniform ``u = rng.random()`` and a walk of the cumulative distribution, best
token first: the first index whose cumulative weight exceeds ``u * total`` (exactly what
``random.Random.choices(best, weights=probs)`` does, so seeds keep their old meaning).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from evermind.errors import ConfigError

__all__ = ["sample", "sample_uniform", "stream_tokens"]


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
        temperature: 0 (or below) is greedy (the highest logit, lowest id on ties; no draw
            from ``rng``); otherwise the scores are divided by it before the softmax.
        top_k: Keep only the k highest scores; None or <= 0 keeps all.
        top_p: Keep the smallest set of the most likely tokens whose probabilities reach
            ``top_p`` (nucleus sampling); None or >= 1 keeps all.
        rng: The random source (seeded for reproducible draws); one ``random()`` per draw.
    """
    if temperature <= 0:
        return max(range(len(logits)), key=logits.__getitem__)
    return sample_uniform(logits, temperature, top_k, top_p, rng.random())


def sample_uniform(
    logits: Sequence[float],
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    uniform: float,
) -> int:
    """:func:`sample` at ``temperature > 0`` with the draw's uniform given, ``0 <= uniform < 1``."""
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
    # random.Random.choices(best, weights=probs, k=1) with its one random() given.
    cum_weights = list(itertools.accumulate(probs))
    at = bisect.bisect(cum_weights, uniform * (cum_weights[-1] + 0.0), 0, len(best) - 1)
    return best[at]


async def stream_tokens(
    step: Callable[[int], Awaitable[Sequence[float]]],
    reset: Callable[[], None],
    prompt_ids: Sequence[int],
    max_new_tokens: int = 64,
    temperature: float = 0.8,
    top_k: int | None = 40,
    top_p: float | None = 0.95,
    seed: int | None = None,
    eos_id: int | None = None,
) -> AsyncIterator[int]:
    """Yields generated token ids one at a time: one sequence, decoded token by token.

    Resets the decoder, feeds every prompt token, then draws (:func:`sample`, one
    ``random.Random(seed)``) and feeds each drawn token, until ``max_new_tokens`` or
    ``eos_id`` (which is not yielded).

    Args:
        step: Feeds one token, returns the next one's logits (V,).
        reset: Starts a new sequence (zero decoding state).
        prompt_ids: At least one token id.
        max_new_tokens, temperature, top_k, top_p: As :func:`sample` (``max_new_tokens``
            bounds the tokens drawn).
        seed: The draws' random seed (None: a fresh one).
        eos_id: Stop before this token.

    Raises:
        ConfigError: ``prompt_ids`` is empty.
    """
    if not prompt_ids:
        raise ConfigError("generation needs at least one prompt token")
    rng = random.Random(seed)
    reset()
    logits: Sequence[float] = []
    for token in prompt_ids:
        logits = await step(token)
    for _ in range(max_new_tokens):
        token = sample(logits, temperature, top_k, top_p, rng)
        if token == eos_id:
            return
        yield token
        logits = await step(token)
