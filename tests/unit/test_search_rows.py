"""search.rows: the cosine scan over a matrix of unit rows and the orders read from it."""

from __future__ import annotations

import numpy as np
import pytest

from evermind.search.rows import cosine_scores, gram, ranked, top_rows


def _unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)  # (n, d)


@pytest.mark.parametrize("n,d", [(1, 3), (37, 17), (130, 5)])
def test_cosine_scores_and_gram_are_the_row_products(n: int, d: int) -> None:
    rows = _unit_rows(n, d, seed=n)
    query = rows[n // 2]
    scores = cosine_scores(rows, query)  # (n,)
    want = np.array([float(np.sum(r * query, dtype=np.float64)) for r in rows])
    print("max |scan - float64|", float(np.max(np.abs(scores - want))))
    assert scores.shape == (n,) and scores.dtype == np.float32
    assert np.allclose(scores, want, atol=1e-6)
    assert scores[n // 2] == pytest.approx(1.0, abs=1e-6)
    products = gram(rows)  # (n, n)
    assert products.shape == (n, n) and np.allclose(products, products.T)
    assert np.allclose(products[n // 2], scores)


@pytest.mark.parametrize("n,k", [(3, 1), (12, 3), (13, 3), (200, 7), (200, 200)])
def test_top_rows_is_the_k_best_in_score_then_tie_order(n: int, k: int) -> None:
    rng = np.random.default_rng(n + k)
    ids = [f"id{rng.integers(0, 10**6):07d}-{i}" for i in range(n)]
    distinct = rng.permutation(n).astype(np.float32) / n
    got = top_rows(distinct, k, tie=lambda j: ids[j])
    assert got == sorted(range(n), key=lambda j: -float(distinct[j]))[:k]
    tied = rng.choice([0.25, 0.5, 0.75, 1.0], size=n).astype(np.float32)  # many ties
    got = top_rows(tied, k, tie=lambda j: ids[j])
    assert got == sorted(got, key=lambda j: (-float(tied[j]), ids[j]))
    assert sorted(tied[got].tolist()) == sorted(tied.tolist())[n - min(k, n) :]
    if n <= 4 * k:  # every position sorted: ties resolved by the tie key throughout
        assert got == sorted(range(n), key=lambda j: (-float(tied[j]), ids[j]))[:k]


def test_ranked_is_a_stable_descending_order() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9], np.float32)
    assert ranked(scores, 4) == [1, 4, 0, 2]
    assert ranked(scores, 10) == [1, 4, 0, 2, 3]
    assert ranked(scores, 0) == []
