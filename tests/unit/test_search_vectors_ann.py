"""The memory index's approximate path: usearch's HNSW past the size threshold.

Measured, not assumed: on a seeded clustered set above :data:`ANN_MIN_ROWS` the approximate
search must find ≥ 0.95 of the exact top 10 (the exact answer is a float64 numpy scan), and
keep doing so after overwrites and deletes; a filter that admits few rows must still get the
exact answer (the over-fetch, then the exact fallback); tombstones past a quarter of the graph
rebuild it.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from evermind.errors import ConfigError, ShapeError
from evermind.search.ann import ANN_MIN_ROWS
from evermind.search.vectors import VectorIndex

DIM = 24  # small: the graph over 2·10⁴ rows builds in seconds on a busy machine
K = 10


def clustered(n: int, clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit vectors around ``clusters`` random centres, and 60 queries from the same."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def around(count: int) -> np.ndarray:
        rows = centres[rng.integers(0, clusters, count)]
        rows = rows + rng.standard_normal((count, DIM)) * (0.6 / np.sqrt(DIM))
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)

    return around(n), around(60)


def exact(vectors: dict[str, np.ndarray], queries: np.ndarray, k: int = K) -> list[list[str]]:
    """The true top ``k`` keys of each query by cosine (float64), ties by key."""
    keys = sorted(vectors)
    matrix = np.stack([vectors[key] for key in keys]).astype(np.float64)  # (N, D)
    out = []
    for scores in queries.astype(np.float64) @ matrix.T:  # (N,) per query
        best = np.argpartition(-scores, 4 * k)[: 4 * k].tolist()
        out.append([keys[i] for i in sorted(best, key=lambda i: (-scores[i], keys[i]))[:k]])
    return out


def recall(index: VectorIndex, vectors: dict[str, np.ndarray], queries: np.ndarray) -> float:
    found = []
    for query, truth in zip(queries, exact(vectors, queries), strict=True):
        hits = index.search(query.tolist(), K)
        assert index.last_scan == "ann"
        found.append(len({key for key, _ in hits} & set(truth)) / K)
    return float(np.mean(found))


def test_recall_above_the_threshold_and_after_updates() -> None:
    n = ANN_MIN_ROWS + 3000  # still above it after the 2000 deletes below
    rows, queries = clustered(n, clusters=n // 100, seed=7)
    vectors = {f"m{i}": rows[i] for i in range(n)}
    index = VectorIndex()
    index.add_many(list(vectors), list(rows))
    assert index.approximate and index.build_graph()
    measured = recall(index, vectors, queries)
    print(f"recall@{K} at n={n}, dim={DIM}: {measured:.3f}")
    assert measured >= 0.95

    # Updates follow the graph: overwrite 500 keys with fresh vectors, delete 2000 (each
    # delete moves the last row into its hole, which the graph must rename).
    fresh, _ = clustered(500, clusters=5, seed=8)
    for i, vector in enumerate(fresh):
        key = f"m{i * 3}"
        index.add(key, vector.tolist())
        vectors[key] = vector
    for i in range(1, 4001, 2):
        index.remove(f"m{i}")
        del vectors[f"m{i}"]
    assert len(index) == len(vectors)
    after = recall(index, vectors, queries)
    print(f"recall@{K} after 500 overwrites and 2000 deletes: {after:.3f}")
    assert after >= 0.95
    for i in (0, 8, 498):  # an overwritten (even, kept) key is found by its new vector
        hits = index.search(fresh[i].tolist(), 1)
        assert hits[0][0] == f"m{i * 3}" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    for query in queries[:10]:  # a deleted key never comes back
        assert all(
            int(key[1:]) % 2 == 0 or int(key[1:]) > 4000 for key, _ in index.search(query, 50)
        )


def test_filtered_search_overfetches_then_falls_back_to_the_exact_scan() -> None:
    rows, queries = clustered(6000, clusters=60, seed=3)  # more rows than ANN_MAX_FETCH
    vectors = {f"m{i}": rows[i] for i in range(6000)}
    index = VectorIndex(ann_min_rows=1000)
    exact_index = VectorIndex(ann=False)
    index.add_many(list(vectors), list(rows))
    exact_index.add_many(list(vectors), list(rows))
    assert index.build_graph()

    def every_fifth(key: str) -> bool:
        return int(key[1:]) % 5 == 0

    matched = []
    for query in queries[:20]:
        hits = index.search(query.tolist(), K, accept=every_fifth)
        assert index.last_scan == "ann" and len(hits) == K
        assert all(every_fifth(key) for key, _ in hits)
        truth = {key for key, _ in exact_index.search(query.tolist(), K, accept=every_fifth)}
        matched.append(len(truth & {key for key, _ in hits}) / K)
    assert np.mean(matched) >= 0.95

    # Two admitted keys, far from the query: no over-fetch finds them, the exact scan does.
    few = {"m11", "m5999"}
    hits = index.search(queries[0].tolist(), K, accept=few.__contains__)
    assert index.last_scan == "numpy"
    assert hits == exact_index.search(queries[0].tolist(), K, accept=few.__contains__)
    assert {key for key, _ in hits} == few


def test_below_the_threshold_the_scan_is_exact() -> None:
    rows, queries = clustered(500, clusters=5, seed=1)
    index = VectorIndex()
    index.add_many([f"m{i}" for i in range(500)], list(rows))
    assert not index.approximate
    hits = index.search(queries[0].tolist(), K)
    assert index.last_scan == "numpy"
    assert [key for key, _ in hits] == exact({f"m{i}": rows[i] for i in range(500)}, queries[:1])[0]


def test_tombstones_past_a_quarter_rebuild_the_graph() -> None:
    rows, queries = clustered(2000, clusters=20, seed=5)
    vectors = {f"m{i}": rows[i] for i in range(2000)}
    index = VectorIndex(ann_min_rows=1000)
    index.add_many(list(vectors), list(rows))
    assert index.build_graph()
    keeper = index._keeper  # internal: the test watches the graph being replaced
    graph = keeper.graph
    assert graph is not None and graph.tombstones == 0 and keeper.builds == 1
    for i in range(0, 1000, 2):  # 500 of 1500 left: a third
        index.remove(f"m{i}")
        del vectors[f"m{i}"]
    assert graph.needs_rebuild()
    index.search(queries[0].tolist(), K)  # the old graph serves while the new one builds
    assert index.build_graph() and keeper.graph is not graph and keeper.graph.tombstones == 0
    hits = index.search(queries[0].tolist(), K)
    assert index.last_scan == "ann" and keeper.builds == 2
    assert len({key for key, _ in hits} & set(exact(vectors, queries[:1])[0])) >= 9


def test_the_first_build_runs_in_the_background_and_keeps_the_changes_made_meanwhile() -> None:
    rows, queries = clustered(4000, clusters=40, seed=9)
    vectors = {f"m{i}": rows[i] for i in range(4000)}
    index = VectorIndex(ann_min_rows=1000)
    index.add_many(list(vectors), list(rows))
    first = index.search(queries[0].tolist(), K)  # starts the build, answers exactly
    assert index.last_scan == "numpy" and index._keeper.building
    assert [key for key, _ in first] == exact(vectors, queries[:1])[0]
    # While it builds: overwrite, delete (moving rows), and append; then take it up.
    fresh, _ = clustered(300, clusters=3, seed=10)
    for i in range(100):
        index.add(f"m{i}", fresh[i].tolist())
        vectors[f"m{i}"] = fresh[i]
    for i in range(100, 200):
        index.remove(f"m{i}")
        del vectors[f"m{i}"]
    index.add_many([f"new{i}" for i in range(200)], list(fresh[100:]))
    vectors.update({f"new{i}": fresh[100 + i] for i in range(200)})
    assert index.build_graph()
    for probe, key in ((fresh[5], "m5"), (fresh[150], "new50"), (rows[3000], "m3000")):
        hits = index.search(probe.tolist(), 1)
        assert index.last_scan == "ann" and hits[0][0] == key
    assert recall(index, vectors, queries) >= 0.95
    for query in queries[:10]:
        assert not {key for key, _ in index.search(query, 50)} & {f"m{i}" for i in range(100, 200)}


def test_bad_arguments_say_what_was_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    index = VectorIndex()
    with pytest.raises(ShapeError, match="2 keys but 1 vectors"):
        index.add_many(["a", "b"], [[1.0, 0.0]])
    with pytest.raises(ShapeError, match="NaN or infinity"):
        index.add_many(["a", "b"], [[1.0, 0.0], [float("nan"), 1.0]])
    assert len(index) == 0  # nothing of the refused batch went in
    with pytest.raises(ConfigError, match="ann_min_rows must be >= 1"):
        VectorIndex(ann_min_rows=0)
    monkeypatch.setitem(sys.modules, "usearch.index", None)  # as if usearch were missing
    with pytest.raises(ConfigError, match="usearch"):
        VectorIndex(ann=True)
    assert not VectorIndex(ann_min_rows=1).approximate or len(VectorIndex()) == 0
