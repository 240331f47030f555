"""The batched numpy sampler draws exactly the tokens of the one pure-Python sampler.

:func:`evermind.model.sampling_rows.sample_rows` must give, row by row, the token
:func:`evermind.model.sampling.sample` gives for the same logits, settings and seeded
``random.Random`` (and leave each rng in the same state), over many seeds, mixed settings per
batch, tied scores, -0.0 and float64 logits; its exact redraw path (forced here by a huge
margin) must agree too. :func:`sample` itself must keep the seeds' old meaning: the draw of
``random.Random.choices`` it replaced.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random

import numpy as np
import pytest

from evermind.errors import ShapeError
from evermind.model.sampling import sample
from evermind.model.sampling_rows import margin, sample_rows

#: (temperature, top_k, top_p) per row, cycled over the batch.
SETTINGS = [
    (1.0, None, None),
    (0.8, 40, 0.95),
    (1.2, None, 0.9),
    (0.0, None, None),
    (0.5, 5, None),
    (1.0, 0, 1.0),
    (2.0, 3000, 0.5),
    (0.7, 1, None),
    (3.0, None, 0.999),
]


def choices_sample(
    logits: list[float], temperature: float, top_k: int | None, top_p: float | None,
    rng: random.Random,
) -> int:  # fmt: skip
    """The sampler as it was before the uniform was exposed (rng.choices draws)."""
    if temperature <= 0:
        return max(range(len(logits)), key=logits.__getitem__)
    k = len(logits) if not top_k or top_k <= 0 else min(top_k, len(logits))
    best = heapq.nlargest(k, range(len(logits)), key=logits.__getitem__)
    weights = [math.exp((logits[i] - logits[best[0]]) / temperature) for i in best]
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


def batch_logits(seed: int, rows: int, vocab: int, dtype: type = np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1 + seed % 4, (rows, vocab)).astype(dtype)
    logits[:, : vocab // 8] = logits[:, vocab // 8 : 2 * (vocab // 8)]  # many ties
    logits[0, :3] = [0.0, -0.0, 0.0]
    return logits


def check(logits: np.ndarray, seed: int, exact_margin: float | None = None) -> int:
    rows = logits.shape[0]
    settings = [SETTINGS[(seed + b) % len(SETTINGS)] for b in range(rows)]
    seeds = [seed * 1000 + b for b in range(rows)]
    batched_rngs = [random.Random(s) for s in seeds]
    one_rngs = [random.Random(s) for s in seeds]
    got = sample_rows(
        logits, *[[s[i] for s in settings] for i in range(3)], batched_rngs, exact_margin
    )
    want = [sample(logits[b].tolist(), *settings[b], one_rngs[b]) for b in range(rows)]
    assert got == want, f"seed {seed}: first difference at row {np.argmax(np.array(got) != want)}"
    assert [r.getstate() for r in batched_rngs] == [r.getstate() for r in one_rngs]
    return rows


def test_same_tokens_as_the_pure_python_sampler_on_many_seeds() -> None:
    drawn = sum(check(batch_logits(seed, 23, 2048), seed) for seed in range(60))
    drawn += sum(check(batch_logits(seed, 7, 97), seed) for seed in range(60, 200))
    print(f"{drawn} rows drawn, all equal")


def test_a_few_rows_walk_each_row_whole_and_draw_the_same() -> None:
    """Below PREFIX_MIN_ROWS sampled rows the draw walks each row's whole running sum
    (_draw_by_rows) instead of blocks: the same tokens, its exact redraw path too."""
    from evermind.model.sampling_rows import PREFIX_MIN_ROWS

    drawn = 0
    for rows in range(1, PREFIX_MIN_ROWS + 1):  # the last one takes the blocks
        drawn += sum(check(batch_logits(seed, rows, 2048), seed) for seed in range(40))
        drawn += sum(check(batch_logits(seed, rows, 97), seed) for seed in range(40, 80))
        check(batch_logits(rows, rows, 301), rows, exact_margin=10.0)
    print(f"{drawn} rows drawn, all equal")


def test_rows_all_with_top_k_take_the_partial_sort() -> None:
    """Every row cut to a top-k well below V: only the best max(k) scores are sorted."""
    for seed in range(40):
        logits = batch_logits(seed, 11, 2048)
        logits[:, 100:140] = logits.max(axis=1, keepdims=True)  # 41 tied best: cut among ties
        settings = [(0.9, (1, 5, 40, 100)[b % 4], (None, 0.95)[b % 2]) for b in range(11)]
        seeds = [seed * 100 + b for b in range(11)]
        got = sample_rows(logits, *[[s[i] for s in settings] for i in range(3)],
                          [random.Random(s) for s in seeds])  # fmt: skip
        want = [sample(logits[b].tolist(), *settings[b], random.Random(seeds[b]))
                for b in range(11)]  # fmt: skip
        assert got == want, seed


def test_the_exact_redraw_path_agrees() -> None:
    for seed in range(20):
        check(batch_logits(seed, 9, 301), seed, exact_margin=10.0)  # every row redrawn


def test_float64_logits_and_vocabulary_of_one() -> None:
    for seed in range(20):
        check(batch_logits(seed, 5, 50, np.float64), seed)
    assert sample_rows(np.zeros((2, 1), np.float32), [1.0, 0.0], [None] * 2, [0.5, None],
                       [random.Random(1), random.Random(2)]) == [0, 0]  # fmt: skip


def test_subnormal_temperatures_draw_as_the_pure_python_sampler() -> None:
    logits = batch_logits(3, 4, 64)
    for temperature in (5e-324, 1e-308, 2.2250738585072014e-308):
        rngs, same = [random.Random(i) for i in range(4)], [random.Random(i) for i in range(4)]
        with np.errstate(all="raise"):  # no warning escapes
            got = sample_rows(logits, [temperature] * 4, [None] * 4, [None] * 4, rngs)
        assert got == [
            sample(logits[b].tolist(), temperature, None, None, same[b]) for b in range(4)
        ]


def test_greedy_rows_draw_nothing() -> None:
    rng = random.Random(5)
    state = rng.getstate()
    assert sample_rows(np.array([[0.1, 3.0, 3.0]], np.float32), [0.0], [None], [None], [rng]) == [1]
    assert rng.getstate() == state


def test_sample_keeps_the_meaning_of_seeds() -> None:
    for seed in range(200):
        logits = batch_logits(seed, 1, 300)[0].tolist()
        settings = SETTINGS[seed % len(SETTINGS)]
        a, b = random.Random(seed), random.Random(seed)
        assert sample(logits, *settings, a) == choices_sample(logits, *settings, b)
        assert a.getstate() == b.getstate()


def test_margin_covers_exp_rounding() -> None:
    """np.exp and math.exp differ by at most one ulp here; the margin is far above the
    drift that makes in a running sum of a vocabulary's weights."""
    x = -np.abs(np.random.default_rng(0).normal(0, 5, 100_000))
    ours, theirs = np.exp(x), np.array([math.exp(v) for v in x.tolist()])
    worst = float(np.max(np.abs(ours - theirs) / theirs))
    print(f"np.exp vs math.exp: {np.mean(ours != theirs):.1%} differ, worst {worst:.2e} relative")
    assert worst <= 2.3e-16
    assert margin(2048) > 1000 * 4 * 2048 * 2.3e-16


def test_the_pairwise_total_is_within_the_margins_bound_of_the_running_sum() -> None:
    """sample_rows totals the weights with numpy's pairwise sum; the reference adds them one
    by one. They differ by far less than the V * 2.2e-16 relative the margin allows."""
    rng = np.random.default_rng(1)
    worst = 0.0
    for scale in (0.1, 1.0, 5.0, 30.0):
        scores = -np.sort(np.abs(rng.normal(0, scale, (64, 2048))), axis=1)  # best (0) first
        weights = np.exp(scores - scores[:, :1])
        pairwise = weights.sum(axis=1)
        running = np.array([sum(row) for row in weights.tolist()])  # the reference's sum()
        worst = max(worst, float(np.max(np.abs(pairwise - running) / running)))
    print(f"pairwise vs running total: worst {worst:.2e} relative")
    assert worst <= 2048 * 2.3e-16


def test_block_running_sums_are_within_the_margins_bound_of_the_sequential_ones() -> None:
    """sample_rows walks the running probabilities by blocks (_Prefix: block totals, then one
    block term by term); at every index, and in every bisection, they agree with the
    reference's sequential running sum to far less than the margin, on widths that are not a
    multiple of the block."""
    from evermind.model.sampling_rows import _Prefix

    rng = np.random.default_rng(2)
    worst = 0.0
    for width in (1, 63, 64, 301, 2048):
        scores = -np.sort(np.abs(rng.normal(0, 2.0, (7, width))), axis=1)
        weights = np.exp(scores - scores[:, :1])
        running = np.array([list(itertools.accumulate(row)) for row in weights.tolist()])
        running /= running[:, -1:]
        prefix = _Prefix(weights)
        rows = np.repeat(np.arange(7), width)
        index = np.tile(np.arange(width), 7)
        got = prefix.at(rows, index).reshape(7, width)
        worst = max(worst, float(np.max(np.abs(got - running))))
        for side in ("left", "right"):
            targets = rng.random(7) * 0.999
            found = prefix.search(np.arange(7), targets, side)
            want = [int(np.searchsorted(got[r], targets[r], side)) for r in range(7)]
            assert found.tolist() == want
    print(f"block vs sequential running sums: worst {worst:.2e}")
    assert worst <= 4 * 2048 * 2.3e-16 < margin(2048)


def test_rejects_mismatched_settings() -> None:
    with pytest.raises(ShapeError, match="settings"):
        sample_rows(np.zeros((2, 4), np.float32), [1.0], [None], [None], [random.Random()])
