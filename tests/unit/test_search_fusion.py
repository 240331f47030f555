"""search.fusion: z-scores, min-max scaling, convex fusion and RRF, and the MMR entry point."""

from __future__ import annotations

import math

import pytest

from evermind.search.calibration import pearson
from evermind.search.fusion import convex, fuse_convex, fuse_rrf, unit_scale, zscores
from evermind.search.mmr import mmr


def test_zscores_and_pearson() -> None:
    z = zscores({"a": 1.0, "b": 2.0, "c": 3.0})
    assert z["b"] == 0.0 and z["c"] == pytest.approx(math.sqrt(1.5))
    assert sum(z.values()) == pytest.approx(0.0)
    assert zscores({"a": 0.7, "b": 0.7}) == {"a": 0.0, "b": 0.0}
    assert zscores({}) == {}
    based = zscores({"a": 1.0, "b": 3.0, "c": 11.0}, basis=["a", "b"])  # mean 2, std 1
    assert based == {"a": -1.0, "b": 1.0, "c": 9.0}
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.5]) == pytest.approx(0.9986, abs=1e-3)
    assert pearson([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0
    with pytest.raises(ValueError, match="lengths differ"):
        pearson([1.0], [1.0, 2.0])


def test_convex_fusion_weights_move_the_order() -> None:
    dense = [("a", 0.9), ("b", 0.5), ("c", 0.1)]
    lexical = [("c", 9.0), ("b", 4.0), ("d", 1.0)]
    only_lexical = fuse_convex(dense, lexical, 0.0)
    only_dense = fuse_convex(dense, lexical, 1.0)
    assert max(only_lexical, key=only_lexical.__getitem__) == "c"
    assert max(only_dense, key=only_dense.__getitem__) == "a"
    # d came from the lexical arm only: its dense score is the lowest dense one (0.1).
    assert only_dense["d"] == pytest.approx(only_dense["c"])
    # a came from the dense arm only: its lexical score is 0, the bottom.
    assert only_lexical["a"] == min(only_lexical.values())
    assert max(fuse_convex(dense, lexical, 0.5).values()) == 1.0


def test_rrf_is_reciprocal_ranks_scaled_to_one() -> None:
    fused = fuse_rrf([("a", 0.9), ("b", 0.5)], [("b", 3.0), ("c", 1.0)], 60)
    raw = {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62}
    top = max(raw.values())
    assert fused == pytest.approx({key: value / top for key, value in raw.items()})


def test_unit_scale_keeps_the_weakest_ranked_and_ties_at_one() -> None:
    assert unit_scale({"a": 3.0, "b": 1.0, "c": 2.0}) == {"a": 1.0, "b": 1e-9, "c": 0.5}
    assert unit_scale({"a": 0.4, "b": 0.4}) == {"a": 1.0, "b": 1.0}
    assert unit_scale({}) == {}


def test_convex_z_scores_over_the_basis_and_mixes_by_weight() -> None:
    lexical = {"a": 4.0, "b": 0.0, "c": 2.0, "d": 9.0}
    dense = {"a": 0.1, "b": 0.8, "c": 0.5, "d": 0.0}
    basis = ["a", "b", "c"]  # "d" lies outside the pool whose statistics count
    fused = convex(lexical, dense, 0.25, basis)
    z_lex, z_dense = zscores(lexical, basis), zscores(dense, basis)
    mixed = {k: 0.75 * z_lex[k] + 0.25 * z_dense[k] for k in lexical}
    bottom, top = min(mixed.values()), max(mixed.values())
    print({k: fused[k] - (mixed[k] - bottom) / (top - bottom) for k in fused})
    for key in lexical:
        assert fused[key] == max((mixed[key] - bottom) / (top - bottom), 1e-9)
    assert list(fused) == ["a", "b", "c", "d"]  # the lexical mapping's order
    # A generator basis is read once per signal: both z-scores use it.
    assert convex(lexical, dense, 0.25, iter(basis)) == fused
    # The dense weight decides: all dense, "b" leads; all lexical, "d" does.
    assert max(convex(lexical, dense, 1.0).items(), key=lambda kv: kv[1])[0] == "b"
    assert max(convex(lexical, dense, 0.0).items(), key=lambda kv: kv[1])[0] == "d"


def test_mmr_rescales_relevance_to_the_similarity_scale() -> None:
    # Relevance 10 vs 9.5: unscaled, (1 - λ)·similarity could never outweigh it.
    relevance = {"a": 10.0, "a2": 9.5, "b": 6.0}

    def similarity(x: str, y: str) -> float:
        return 1.0 if {x, y} == {"a", "a2"} else 0.0

    assert mmr(relevance, similarity, 2, 0.5) == ["a", "b"]
    assert mmr(relevance, similarity, 2, 1.0) == ["a", "a2"]
    assert mmr({}, similarity, 3, 0.5) == []
    # All-zero relevance is taken as it is (no division by zero): ties by id.
    assert mmr({"y": 0.0, "x": 0.0}, similarity, 2, 0.7) == ["x", "y"]


def test_top_k_asks_accept_only_about_the_best_and_keeps_the_sorted_order() -> None:
    from evermind.search.fusion import top_k

    scores = {f"d{i:04d}": float(i % 97) for i in range(3000)}  # many ties: the id breaks them
    asked: list[str] = []

    def odd(key: str) -> bool:
        asked.append(key)
        return int(key[1:]) % 2 == 1

    want = [kv for kv in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])) if odd(kv[0])][:5]
    asked.clear()
    assert top_k(scores, 5, odd) == want
    assert len(asked) <= 20  # not 3,000
    # Too few pass in the window: it widens to all and still returns them in order.
    rare = {"d0001", "d2999"}
    assert [k for k, _ in top_k(scores, 5, rare.__contains__)] == sorted(
        rare, key=lambda k: (-scores[k], k)
    )
    assert top_k(scores, 0) == [] and top_k({}, 3) == []
