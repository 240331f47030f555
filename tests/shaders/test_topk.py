"""topk.wgsl (cosine top-k) against its numpy reference on wgpu-py (lavapipe in CI)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.kernels.topk import TopK
from evermind.ops import topk as ref
from tests.conftest import read_f32
from tests.numerics import assert_close

# Scores are f32 dot products of unit vectors: |error| <= ~D ulp of 1; 1e-5 covers D <= 512.
SCORE_ATOL = 1e-5


def _unit_rows(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _run(device, query: np.ndarray, stored: np.ndarray, k: int, topk: TopK | None = None):
    (q, d), n = query.shape, stored.shape[0]
    topk = topk or TopK(device)
    bq, bs = device.upload(query, label="query"), device.upload(stored, label="stored")
    scores, index = (
        device.buffer(4 * q * k, label="scores"),
        device.buffer(4 * q * k, label="index"),
    )
    device.submit(topk.search(bq, bs, scores, index, q, n, d, k))
    got_scores = read_f32(device, scores, q * k).reshape(q, k)
    got_index = np.frombuffer(asyncio.run(device.read(index)), np.uint32).reshape(q, k).copy()
    device.destroy(bq, bs, scores, index)
    return got_scores, got_index


def _check(query, stored, k, got_scores, got_index, name: str) -> None:
    """Exact index match where the reference order is unambiguous at f32 precision."""
    want_scores, want_index = ref.topk(query, stored, k)
    assert_close(got_scores, want_scores, atol=SCORE_ATOL, rtol=0, name=f"{name} scores")
    exact = ref.cosine_scores(query, stored)
    for qi in range(query.shape[0]):
        # The returned rows really have the returned scores, and come best first.
        assert_close(
            got_scores[qi],
            exact[qi, got_index[qi]],
            atol=SCORE_ATOL,
            rtol=0,
            name=f"{name} q{qi} scores of returned rows",
        )
        assert np.all(np.diff(got_scores[qi]) <= 0), f"{name} q{qi}: scores not descending"
        top = np.sort(exact[qi])[::-1][: k + 1]
        if top.size < 2 or np.min(-np.diff(top)) > 4 * SCORE_ATOL:
            np.testing.assert_array_equal(got_index[qi], want_index[qi], err_msg=f"{name} q{qi}")
        else:  # near-ties: every clearly-better row must be there
            must = np.nonzero(exact[qi] > top[min(k, top.size) - 1] + 4 * SCORE_ATOL)[0]
            assert set(must.tolist()) <= set(got_index[qi].tolist()), f"{name} q{qi}"


# (Q, N, D, k): N = 1, WG-1, WG, WG+1, 4 WG+1 (a merge chunk holding one real candidate and
# sentinel padding), a prime; D = 1, 3, the nano 128, a prime.
SHAPES = [
    (1, 1, 3, 1),
    (2, 255, 128, 64),
    (1, 256, 1, 1),
    (3, 257, 131, 64),
    (2, 1025, 128, 64),
    (1, 4099, 17, 10),
    (2, 20011, 128, 64),
]


@pytest.mark.parametrize(("q", "n", "d", "k"), SHAPES)
def test_matches_reference(device, q: int, n: int, d: int, k: int) -> None:
    rng = np.random.default_rng(n * 10 + d)
    stored = _unit_rows(n, d, rng)
    query = (rng.standard_normal((q, d)) * 7).astype(np.float32)  # not unit: normalised here
    got_scores, got_index = _run(device, query, stored, k)
    _check(query, stored, k, got_scores, got_index, f"topk Q={q} N={n} D={d} k={k}")


@pytest.mark.slow
def test_hundred_thousand_rows(device) -> None:
    rng = np.random.default_rng(100)
    stored = _unit_rows(100_000, 128, rng)
    query = rng.standard_normal((1, 128)).astype(np.float32)
    got_scores, got_index = _run(device, query, stored, 64)
    _check(query, stored, 64, got_scores, got_index, "topk N=100k")


def test_ties_prefer_lower_index_and_runs_repeat(device) -> None:
    # 600 rows drawn from 5 distinct vectors: every score is tied ~120 ways, exactly (equal
    # rows give bitwise-equal dot products), so the order is decided by index alone.
    rng = np.random.default_rng(5)
    base = _unit_rows(5, 16, rng)
    pick = rng.integers(0, 5, size=600)
    stored = base[pick]
    query = base[2:3] + 0.1 * base[4:5]
    k = 64
    topk = TopK(device)
    first = _run(device, query, stored, k, topk)
    second = _run(device, query, stored, k, topk)
    np.testing.assert_array_equal(first[1], second[1])
    np.testing.assert_array_equal(first[0], second[0])
    scores = ref.cosine_scores(query, stored)[0]
    best = np.argmax(scores)
    ranked = [int(i) for i in np.nonzero(pick == pick[best])[0][:k]]
    assert first[1][0].tolist()[: len(ranked)] == ranked


def test_zero_and_extreme_queries(device) -> None:
    rng = np.random.default_rng(6)
    stored = _unit_rows(300, 24, rng)
    query = np.zeros((3, 24), np.float32)
    query[1] = stored[123] * np.float32(1e30)  # would overflow a naive sum of squares
    query[2] = stored[77] * np.float32(1e-20)  # norm below eps: divided by eps (F.normalize)
    got_scores, got_index = _run(device, query, stored, 5)
    assert np.isfinite(got_scores).all()
    _check(query, stored, 5, got_scores, got_index, "extreme queries")
    # A zero query scores 0 everywhere: the first k rows win the tie.
    assert got_index[0].tolist() == [0, 1, 2, 3, 4] and not got_scores[0].any()
    assert got_index[1][0] == 123 and got_index[2][0] == 77
    assert_close(got_scores[1, :1], np.ones(1), atol=SCORE_ATOL, rtol=0, name="self similarity")


def test_rejects_bad_arguments(device) -> None:
    topk = TopK(device)
    buf = device.buffer(4 * 64)
    with pytest.raises(ShapeError, match="k <= min"):
        topk.search(buf, buf, buf, buf, 1, 4, 4, 5)
    with pytest.raises(ShapeError, match="k <= min"):
        topk.search(buf, buf, buf, buf, 1, 64, 1, 65)
    with pytest.raises(ShapeError, match="holds 64 f32"):
        topk.search(buf, buf, buf, buf, 1, 100, 1, 1)
    with pytest.raises(ConfigError, match="power of two"):
        TopK(device, workgroup_size=100)


def browser_cases() -> list:
    """Small cases for the browser run (see tests/kernel_cases.py)."""
    from tests.kernel_cases import KernelCase

    launcher = "evermind.kernels.topk:TopK"
    cases = []
    for q, n, d, k in [(2, 1025, 32, 16), (1, 257, 7, 64)]:
        rng = np.random.default_rng(42 + n)
        stored = _unit_rows(n, d, rng)
        query = rng.standard_normal((q, d)).astype(np.float32)
        want_scores, want_index = ref.topk(query, stored, k)
        cases.append(
            KernelCase(
                f"topk.search Q={q} N={n} k={k}",
                launcher,
                "search",
                [
                    {"buf": "query"},
                    {"buf": "stored"},
                    {"buf": "scores"},
                    {"buf": "index"},
                    q,
                    n,
                    d,
                    k,
                ],
                {
                    "query": query,
                    "stored": stored,
                    "scores": np.zeros((q, k), np.float32),
                    "index": np.zeros((q, k), np.uint32),
                },
                {"scores": want_scores, "index": want_index},
                SCORE_ATOL,
                0.0,
            )
        )
    return cases
