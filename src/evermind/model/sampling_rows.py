"""The one sampler over a batch of logits rows at once, in numpy (native-only: imports numpy).

:func:`sample_rows` is :func:`evermind.model.sampling.sample` for B rows, each with its own
temperature, top-k, top-p and ``random.Random``: one sort of the scores, one softmax and one
running sum of (B, V) arrays instead of B Python loops over the vocabulary (the drawn rank's
token id is looked up afterwards: the sums need only the sorted values, equal whatever the
order of ties). The tab keeps the
standard-library sampler; this is the native runtime's batched form of the same draw.

Same draws, not just the same distribution: per sampled row it takes the same single
``rng.random()``, orders the tokens the same way (best first, lower id first on ties), keeps
the same top-k and top-p sets and walks the same cumulative distribution (running sums are
sequential in both, so they add the same numbers in the same order). Two things differ in
rounding only: ``np.exp`` against ``math.exp``, which may round a weight differently in the
last place, and the weights' total, numpy's pairwise sum against the reference's running sum
(both within ``V * 2.2e-16`` relative of the exact total, which is at least 1: the best weight
is exp(0)), so each probability moves by a few ulps and the cumulative sums by at most a few
ulps per term. A row whose top-p cut or draw lies
within :func:`margin` of a cumulative boundary (so that such a difference could change it;
about one row in 10^8 at V = 2048) is redrawn exactly, with the same uniform, by
:func:`~evermind.model.sampling.sample_uniform`. Every other row's token is provably the
pure-Python one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ShapeError
from evermind.model.sampling import sample_uniform

__all__ = ["margin", "sample_rows"]


def margin(vocab_size: int) -> float:
    """How near a cumulative boundary a draw may fall before it is redrawn exactly.

    The weights of ``np.exp`` and ``math.exp`` differ by at most one ulp (2.2e-16 relative),
    the two totals by at most ``vocab_size * 2.2e-16`` relative, and every weight, probability
    and running sum is at most 1, so two running sums over ``vocab_size`` terms differ by at
    most about ``4 * vocab_size * 2.2e-16``; the margin is over a thousand times that.
    """
    return 1e-12 * max(1, vocab_size)


def sample_rows(
    logits: npt.ArrayLike,
    temperature: Sequence[float],
    top_k: Sequence[int | None],
    top_p: Sequence[float | None],
    rngs: Sequence[random.Random],
    exact_margin: float | None = None,
) -> list[int]:
    """One token per row, as ``sample(logits[b].tolist(), temperature[b], ...)`` would draw.

    Args:
        logits: (B, V) scores.
        temperature, top_k, top_p, rngs: Per row, as :func:`~evermind.model.sampling.sample`
            takes them; a row at temperature <= 0 is greedy and draws nothing from its rng.
        exact_margin: The redraw margin (tests widen it to exercise the exact path);
            None is :func:`margin`.

    Returns:
        B token ids.
    """
    rows = np.asarray(logits)
    if rows.ndim != 2 or not (len(temperature) == len(top_k) == len(top_p) == len(rngs)):
        raise ShapeError(
            f"sample_rows: expected (B, V) logits and B settings, got shape {rows.shape} and "
            f"{len(temperature)}/{len(top_k)}/{len(top_p)}/{len(rngs)} settings"
        )
    batch, vocab = rows.shape
    if len(rngs) != batch:
        raise ShapeError(f"sample_rows: {len(rngs)} settings for {batch} rows")
    tokens: list[int] = np.argmax(rows, axis=1).tolist()  # greedy: the first highest score
    hot = [b for b in range(batch) if temperature[b] > 0]
    if not hot:
        return tokens
    uniform = np.array([rngs[b].random() for b in hot])  # (H,): the draw's one random()
    temps = np.array([float(temperature[b]) for b in hot])
    keep = np.array([_kept(top_k[b], vocab) for b in hot])  # (H,) top-k
    nucleus = np.array([_nucleus(top_p[b]) for b in hot])  # (H,) top-p, 2 for none
    picked, unsure = _draw(rows[hot], temps, keep, nucleus, uniform, exact_margin or margin(vocab))
    for h, b in enumerate(hot):
        if unsure[h]:
            tokens[b] = sample_uniform(
                rows[b].tolist(), temperature[b], top_k[b], top_p[b], float(uniform[h])
            )
        else:
            tokens[b] = picked[h]
    return tokens


def _kept(top_k: int | None, vocab: int) -> int:
    return vocab if not top_k or top_k <= 0 else min(top_k, vocab)


def _nucleus(top_p: float | None) -> float:
    return 2.0 if top_p is None or top_p >= 1 else float(top_p)  # 2: never reached


def _token_at(scores: npt.NDArray[Any], value: Any, tie: int) -> int:
    """The id of the ``tie``-th token (in id order) whose score equals ``value``: the token at
    that rank of a stable best-first order (ties keep the lower id first)."""
    return int(np.flatnonzero(scores == value)[tie])


def _draw(
    x: npt.NDArray[Any],
    temps: npt.NDArray[np.float64],
    keep: npt.NDArray[np.int64],
    nucleus: npt.NDArray[np.float64],
    uniform: npt.NDArray[np.float64],
    tol: float,
) -> tuple[list[int], list[bool]]:
    """The draws of H sampled rows x (H, V): token ids, and whether to redraw each exactly."""
    rows, vocab = x.shape
    # The scores best first; the sums need only the values (ties are equal whatever their
    # order), so a plain vectorised sort does and the ids are found after the draw. With
    # top-k on every row only the best max(k) are sorted (a partition first).
    widest = int(keep.max())
    if widest * 4 <= vocab:
        best = np.partition(-x, widest - 1, axis=1)[:, :widest]  # (H, K), any order
        ascending = np.sort(best, axis=1)  # (H, K): minus the k best scores, best first
    else:
        ascending = np.sort(-x, axis=1)  # (H, V): minus the scores, best first
    ranked = -ascending.astype(np.float64)
    ranked -= ranked[:, :1]
    with np.errstate(over="ignore", under="ignore"):  # a subnormal temperature: -inf, exp 0
        ranked /= temps[:, None]  # as Python's float division does
        weights = np.exp(ranked, out=ranked)  # (H, V), max 1: no overflow
    for cut_row in np.nonzero(keep < ascending.shape[1])[0]:
        weights[cut_row, keep[cut_row] :] = 0.0  # beyond top-k: adds nothing to the running sums
    # The kept weights' total (those beyond top-k are 0 and add nothing) as numpy's pairwise
    # sum: a running sum costs ~3 ns a term (each add waits for the last), as long again as
    # the rest of the draw; it differs from the reference's running sum only in rounding,
    # which the margin covers (see the module docstring).
    total = weights.sum(axis=1)
    weights /= total[:, None]
    cumulative = np.cumsum(weights, axis=1)  # (H, V): the running probability, sequential
    tokens, unsure = [], []
    # The per-row scalars as Python floats (the same doubles; numpy scalar arithmetic costs
    # ~10x more per operation); the running sums stay numpy rows for the bisections.
    points, nuclei, widths = uniform.tolist(), nucleus.tolist(), keep.tolist()
    for h in range(rows):
        run = cumulative[h, : widths[h]]
        cut = widths[h]
        doubt = False
        p = nuclei[h]
        if p <= 1:  # top-p: the first running sum >= p ends the kept set
            reached = int(run.searchsorted(p, side="left"))
            if reached < cut:
                cut = reached + 1
            # A rounding could move the cut if a running sum at or before it is near p.
            doubt = abs(float(run[min(reached, cut - 1)]) - p) <= tol or (
                reached > 0 and abs(float(run[reached - 1]) - p) <= tol
            )
        point = points[h] * float(run[cut - 1])  # choices(): random() * total
        at = min(int(run[:cut].searchsorted(point, side="right")), cut - 1)  # bisect
        doubt = doubt or float(run[at]) - point <= tol
        doubt = doubt or (at > 0 and point - float(run[at - 1]) <= tol)
        # The draw's rank among the tokens of its score: where that score's run begins.
        scores = ascending[h]
        value = scores[at]
        tie = at - int(scores.searchsorted(value, side="left"))
        tokens.append(_token_at(x[h], -value, tie))
        unsure.append(doubt)
    return tokens, unsure
