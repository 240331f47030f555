"""The one sampler over a batch of logits rows at once, in numpy (native-only: imports numpy).

:func:`sample_rows` is :func:`evermind.model.sampling.sample` for B rows, each with its own
temperature, top-k, top-p and ``random.Random``: one sort of the scores and one softmax of
(B, V) arrays, then the running sums by blocks (:class:`_Prefix`: block totals, and only the
block each search lands in summed term by term), instead of B Python loops over the
vocabulary (the drawn rank's token id is looked up afterwards: the sums need only the sorted
values, equal whatever the order of ties). The tab keeps the
standard-library sampler; this is the native runtime's batched form of the same draw.

Same draws, not just the same distribution: per sampled row it takes the same single
``rng.random()``, orders the tokens the same way (best first, lower id first on ties), keeps
the same top-k and top-p sets and walks the same cumulative distribution. Two things differ
in rounding only: ``np.exp`` against ``math.exp``, which may round a weight differently in the
last place, and the order of the additions: the total and the running sums here add block
totals (numpy's pairwise sums) and then a block's terms one by one, the reference one term
after another (every such sum is within ``V * 2.2e-16`` relative of the exact one, and the
total is at least 1: the best weight is exp(0)), so each probability moves by a few ulps and
the cumulative sums by at most a few ulps per term. A row whose top-p cut or draw lies
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
    sampled = rows if len(hot) == batch else rows[hot]  # every row sampled: no copy
    picked, unsure = _draw(sampled, temps, keep, nucleus, uniform, exact_margin or margin(vocab))
    for h, b in enumerate(hot):
        if unsure[h]:
            tokens[b] = sample_uniform(
                rows[b].tolist(), temperature[b], top_k[b], top_p[b], float(uniform[h])
            )
        else:
            tokens[b] = picked[h]
    return tokens


#: Terms per block of :class:`_Prefix`'s running sums.
PREFIX_BLOCK = 64
#: Sampled rows from which :func:`_draw` walks the running sums by blocks (:class:`_Prefix`);
#: fewer rows take :func:`_draw_by_rows`, each row's whole running sum.
PREFIX_MIN_ROWS = 4


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
        best.sort(axis=1)  # (H, K): minus the k best scores, best first
        ascending = best
    else:
        ascending = np.negative(x)
        ascending.sort(axis=1)  # (H, V): minus the scores, best first (sorted in place)
    ranked = ascending.astype(np.float64)  # minus the scores, float64
    # score - best as (-best) - (-score): the same rounded difference (negation is exact), one
    # pass; the best copied out first, since subtracting from a view of the array being
    # written makes numpy buffer the whole operation (~4x slower).
    np.subtract(ranked[:, :1].copy(), ranked, out=ranked)
    with np.errstate(over="ignore", under="ignore"):  # a subnormal temperature: -inf, exp 0
        if not bool((temps == 1.0).all()):  # x / 1.0 is x: the division changes nothing
            ranked /= temps[:, None]  # as Python's float division does
        weights = np.exp(ranked, out=ranked)  # (H, V), max 1: no overflow
    for cut_row in np.nonzero(keep < ascending.shape[1])[0]:
        weights[cut_row, keep[cut_row] :] = 0.0  # beyond top-k: adds nothing to the running sums
    if rows < PREFIX_MIN_ROWS:
        return _draw_by_rows(x, ascending, weights, keep, nucleus, uniform, tol)
    # The running sums by blocks (see _Prefix): a cumsum of the whole (H, V) is one long
    # dependent chain of adds (~3 ns a term, as long again as the rest of the draw); block
    # totals and the one or two blocks each row's search lands in are enough.
    prefix = _Prefix(weights)
    every = np.arange(rows)
    widths = keep.copy()
    unsure = np.zeros(rows, bool)
    topped = np.flatnonzero(nucleus <= 1)  # top-p: the first running sum >= p ends the kept set
    if topped.size:
        p = nucleus[topped]
        reached = prefix.search(topped, p, side="left")
        cut = np.where(reached < widths[topped], reached + 1, widths[topped])
        widths[topped] = cut
        # A rounding could move the cut if a running sum at or before it is near p.
        unsure[topped] = np.abs(prefix.at(topped, np.minimum(reached, cut - 1)) - p) <= tol
        before = reached > 0
        unsure[topped[before]] |= (
            np.abs(prefix.at(topped[before], reached[before] - 1) - p[before]) <= tol
        )
    point = uniform * prefix.at(every, widths - 1)  # choices(): random() * total
    at = np.minimum(prefix.search(every, point, side="right"), widths - 1)  # bisect
    unsure |= prefix.at(every, at) - point <= tol
    later = at > 0
    unsure[later] |= point[later] - prefix.at(every[later], at[later] - 1) <= tol
    # The draw's rank among the tokens of its score: where that score's run begins (a row
    # whose drawn score differs from the one before it has rank 0); the token with that
    # score at that place in id order (ties keep the lower id first).
    value = ascending[every, at]  # (H,) minus the drawn score
    tokens = np.argmax(x == -value[:, None], axis=1)  # the first of its score
    for h in np.flatnonzero(later & (ascending[every, np.maximum(at - 1, 0)] == value)):
        tie = int(at[h]) - int(ascending[h].searchsorted(value[h], side="left"))
        tokens[h] = _token_at(x[h], -value[h], tie)  # a tied score, not its first: rare
    return tokens.tolist(), unsure.tolist()


def _draw_by_rows(
    x: npt.NDArray[Any],
    ascending: npt.NDArray[Any],
    weights: npt.NDArray[np.float64],
    keep: npt.NDArray[np.int64],
    nucleus: npt.NDArray[np.float64],
    uniform: npt.NDArray[np.float64],
    tol: float,
) -> tuple[list[int], list[bool]]:
    """:func:`_draw`'s walk for a few rows, one row at a time over its whole running sum (a
    few numpy calls a row, where :class:`_Prefix`'s fixed cost of some twenty calls would
    outweigh a 2,048-term cumsum)."""
    total = weights.sum(axis=1)  # numpy's pairwise sum: within the margin (module docstring)
    cumulative = np.cumsum(weights / total[:, None], axis=1)  # (H, V) the running probability
    tokens, unsure = [], []
    # The per-row scalars as Python floats (the same doubles; numpy scalar arithmetic costs
    # ~10x more per operation); the running sums stay numpy rows for the bisections.
    points, nuclei, widths = uniform.tolist(), nucleus.tolist(), keep.tolist()
    for h in range(x.shape[0]):
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


class _Prefix:
    """The running sums of H weight rows (H, W) divided by each row's total, by blocks.

    ``at(rows, index)`` is row's ``cumsum(w)[index] / total`` and ``search`` the bisection of
    a target in that row's running sums: a row's block totals (numpy's pairwise sums of
    :data:`PREFIX_BLOCK` terms) and their running sum locate the block, then the block's own
    running sum (sequential) the index. Every value is a sum of the same non-negative terms as
    the reference's running sum, in another order, so both are within ``W * 2.2e-16`` of the
    exact sum (at most 1 after the division), which :func:`margin` covers with room to spare;
    the draw checks its neighbours against the margin on exactly the values used here.
    """

    def __init__(self, weights: npt.NDArray[np.float64]) -> None:
        rows, width = weights.shape
        blocks = -(-width // PREFIX_BLOCK)
        if blocks * PREFIX_BLOCK != width:  # zeros after the last weight add nothing
            padded = np.zeros((rows, blocks * PREFIX_BLOCK))
            padded[:, :width] = weights
            weights = padded
        self.blocks = weights.reshape(rows, blocks, PREFIX_BLOCK)  # (H, nb, BLOCK)
        ends = np.cumsum(self.blocks.sum(axis=2), axis=1)  # (H, nb): sums up to each block end
        self.total = ends[:, -1].copy()  # (H,) the kept weights' total (those cut are 0)
        self.starts = np.zeros_like(ends)  # (H, nb): the sum before each block
        self.starts[:, 1:] = ends[:, :-1]
        self.ends = ends / self.total[:, None]  # (H, nb) the running probability at block ends

    def _block(self, rows: npt.NDArray[np.int64], block: npt.NDArray[np.int64]) -> Any:
        """The running probabilities within each (row, block), (n, BLOCK)."""
        run = np.cumsum(self.blocks[rows, block], axis=1)
        run += self.starts[rows, block][:, None]
        run /= self.total[rows][:, None]
        return run

    def at(self, rows: npt.NDArray[np.int64], index: npt.NDArray[np.int64]) -> Any:
        """``cumsum(w[row])[index] / total[row]`` for each (row, index), (n,)."""
        block, offset = np.divmod(index, PREFIX_BLOCK)
        if bool((offset == PREFIX_BLOCK - 1).all()):  # block ends (the full vocabulary's last)
            return self.ends[rows, block]
        return self._block(rows, block)[np.arange(rows.size), offset]

    def search(
        self, rows: npt.NDArray[np.int64], target: npt.NDArray[np.float64], side: str
    ) -> npt.NDArray[np.int64]:
        """Each row's ``searchsorted(running probabilities, target, side)`` (n,)."""
        ends = self.ends[rows]
        # The first block whose end reaches the target ("left": >=, "right": >).
        below = ends < target[:, None] if side == "left" else ends <= target[:, None]
        block = np.minimum(below.sum(axis=1), ends.shape[1] - 1)
        run = self._block(rows, block)
        inside = run < target[:, None] if side == "left" else run <= target[:, None]
        found: npt.NDArray[np.int64] = block * PREFIX_BLOCK + inside.sum(axis=1)
        return found
