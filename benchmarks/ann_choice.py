#!/usr/bin/env python3
"""Which approximate-nearest-neighbour library the in-process index uses: measured, not guessed.

Every candidate indexes the same vectors (clustered unit vectors, the data of
``benchmarks/vectorstore_scale.py``) and answers the same queries one at a time, k = 10:

- ``numpy``: the exact float32 scan + top-k that recall runs today (the baseline);
- ``usearch``: HNSW (``usearch.index.Index``, metric ``cos``, float32);
- ``faiss``: HNSW (``faiss.IndexHNSWFlat``, inner product on unit rows);
- ``sqlite-vec``: a ``vec0`` virtual table (an exact scan in C; loaded through ``apsw``,
  since this CPython's ``sqlite3`` cannot load extensions);
- ``hnswlib`` is not measured: PyPI has no wheel of it for this Python (a source build only).

Both HNSW libraries get the same graph parameters (``--m`` neighbours, ``--ef-construction``,
``--ef-search``) and one thread (the machine is shared; a build may use more cores elsewhere).
Reported per library: build seconds, query p50/p99 ms, recall@10 against an exact float64 scan,
and (usearch) the cost of removing 1% of the entries and of re-adding them.

Usage:
    .venv/bin/python -m benchmarks.ann_choice --n 10000 --dim 384
    .venv/bin/python -m benchmarks.ann_choice --n 100000 --dim 64 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
try:
    import evermind  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from benchmarks.vectorstore_scale import _around, exact_top_k, synthetic  # noqa: E402

LIBRARIES = ("numpy", "usearch", "faiss", "sqlite-vec")


def _timed(queries: np.ndarray, search: Callable[[np.ndarray], Sequence[int]], truth: np.ndarray):
    """p50/p99 ms and recall@k of ``search`` over ``queries`` (one at a time)."""
    latencies, recalls = [], []
    k = truth.shape[1]
    for query, expected in zip(queries, truth, strict=True):
        start = time.perf_counter()
        found = search(query)
        latencies.append(time.perf_counter() - start)
        recalls.append(len(set(expected.tolist()) & {int(i) for i in found}) / k)
    ms = np.asarray(latencies) * 1000
    return {
        "query_p50_ms": float(np.percentile(ms, 50)),
        "query_p99_ms": float(np.percentile(ms, 99)),
        "recall_at_k": float(np.mean(recalls)),
    }


def bench_numpy(vectors: np.ndarray, args: argparse.Namespace) -> tuple[float, Callable, dict]:
    start = time.perf_counter()
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    build = time.perf_counter() - start

    def search(query: np.ndarray) -> Sequence[int]:
        scores = matrix @ query
        best = np.argpartition(-scores, args.k - 1)[: args.k]
        return best[np.argsort(-scores[best])]

    return build, search, {}


def bench_usearch(vectors: np.ndarray, args: argparse.Namespace) -> tuple[float, Callable, dict]:
    from usearch.index import Index

    index = Index(
        ndim=vectors.shape[1],
        metric="cos",
        dtype="f32",
        connectivity=args.m,
        expansion_add=args.ef_construction,
        expansion_search=args.ef_search,
    )
    keys = np.arange(len(vectors), dtype=np.uint64)
    start = time.perf_counter()
    index.add(keys, vectors, threads=1)
    build = time.perf_counter() - start

    def search(query: np.ndarray) -> Sequence[int]:
        return index.search(query, args.k, threads=1).keys  # type: ignore[no-any-return]

    # Updates: remove 1% (usearch marks them deleted), then add them back under the same keys.
    gone = keys[::100]
    start = time.perf_counter()
    index.remove(gone)
    removed = time.perf_counter() - start
    start = time.perf_counter()
    index.add(gone, vectors[gone.astype(np.int64)], threads=1)
    readded = time.perf_counter() - start
    extra = {"remove_1pct_s": removed, "readd_1pct_s": readded}
    return build, search, extra


def bench_faiss(vectors: np.ndarray, args: argparse.Namespace) -> tuple[float, Callable, dict]:
    import faiss

    faiss.omp_set_num_threads(1)
    index = faiss.IndexHNSWFlat(vectors.shape[1], args.m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = args.ef_construction
    index.hnsw.efSearch = args.ef_search
    start = time.perf_counter()
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    build = time.perf_counter() - start

    def search(query: np.ndarray) -> Sequence[int]:
        _, ids = index.search(query.reshape(1, -1), args.k)
        return ids[0]  # type: ignore[no-any-return]

    # IndexHNSWFlat cannot remove an entry (remove_ids is not implemented for HNSW).
    return build, search, {"remove": "not supported by IndexHNSWFlat"}


def bench_sqlite_vec(vectors: np.ndarray, args: argparse.Namespace) -> tuple[float, Callable, dict]:
    import apsw
    import sqlite_vec

    db = apsw.Connection(":memory:")
    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    dim = vectors.shape[1]
    db.execute(f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{dim}] distance_metric=cosine)")
    start = time.perf_counter()
    with db:
        db.executemany(
            "INSERT INTO v(rowid, embedding) VALUES (?, ?)",
            ((i, vectors[i].tobytes()) for i in range(len(vectors))),
        )
    build = time.perf_counter() - start
    statement = "SELECT rowid FROM v WHERE embedding MATCH ? AND k = ? ORDER BY distance"

    def search(query: np.ndarray) -> Sequence[int]:
        rows = db.execute(statement, (query.astype(np.float32).tobytes(), args.k)).fetchall()
        return [row[0] for row in rows]

    return build, search, {}


BENCHES = {
    "numpy": bench_numpy,
    "usearch": bench_usearch,
    "faiss": bench_faiss,
    "sqlite-vec": bench_sqlite_vec,
}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every library asked for on one data set; the document the table is printed from."""
    clusters = args.clusters or max(10, min(5000, args.n // 100))
    vectors, _, centres = synthetic(args.n, args.dim, clusters, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    queries = _around(centres, rng.integers(0, clusters, size=args.queries), rng)
    truth = exact_top_k(vectors, queries, args.k)
    rows = []
    for name in args.libraries:
        print(f"{name}: building over {args.n} x {args.dim}", file=sys.stderr, flush=True)
        build, search, extra = BENCHES[name](vectors, args)
        row = {"library": name, "build_s": build, **extra, **_timed(queries, search, truth)}
        print(f"{name}: {json.dumps(row)}", file=sys.stderr, flush=True)
        rows.append(row)
    return {
        "n": args.n,
        "dim": args.dim,
        "clusters": clusters,
        "queries": args.queries,
        "k": args.k,
        "m": args.m,
        "ef_construction": args.ef_construction,
        "ef_search": args.ef_search,
        "rows": rows,
    }


def format_table(doc: dict[str, Any]) -> str:
    k = doc["k"]
    lines = [
        f"n = {doc['n']}, dim = {doc['dim']}, {doc['clusters']} clusters, {doc['queries']} "
        f"queries, k = {k}; HNSW M = {doc['m']}, ef_construction = {doc['ef_construction']}, "
        f"ef_search = {doc['ef_search']}, one thread",
        "",
        f"| library | build s | query p50 ms | query p99 ms | recall@{k} | remove 1% s "
        "| re-add 1% s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in doc["rows"]:
        removed = row.get("remove_1pct_s")
        readded = row.get("readd_1pct_s")
        lines.append(
            f"| {row['library']} | {row['build_s']:.2f} | {row['query_p50_ms']:.3f} "
            f"| {row['query_p99_ms']:.3f} | {row['recall_at_k']:.3f} "
            f"| {'–' if removed is None else f'{removed:.3f}'} "
            f"| {'–' if readded is None else f'{readded:.3f}'} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ann_choice",
        description="Build time, query latency and recall@k of ANN libraries on one data set.",
    )
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=0, help="0: n/100, 10..5000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--m", type=int, default=16, help="HNSW neighbours per node")
    parser.add_argument("--ef-construction", type=int, default=128)
    parser.add_argument("--ef-search", type=int, default=64)
    parser.add_argument(
        "--libraries",
        type=lambda text: [e.strip() for e in text.split(",") if e.strip()],
        default=list(LIBRARIES),
        help=f"comma-separated, of {', '.join(LIBRARIES)} (default: all)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    unknown = sorted(set(args.libraries) - set(LIBRARIES))
    if unknown or args.n < args.k or args.k < 1 or args.queries < 1:
        print(f"error: expected libraries among {list(LIBRARIES)} and n >= k >= 1", file=sys.stderr)
        return 2
    doc = run(args)
    print(json.dumps(doc, indent=2) if args.json else format_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
