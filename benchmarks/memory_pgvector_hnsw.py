#!/usr/bin/env python3
"""The memory's pgvector path alone at 10⁶: the embedding table, its HNSW build, its queries.

What ``MemoryStore`` on Postgres asks past ``SERVED_MIN_ROWS`` (``search/served.py``), without
loading the memories themselves (that load is ``benchmarks/memory_scale.py``'s, ~17 min at 10⁶
on a busy machine): the clustered vectors of ``benchmarks/vectorstore_scale.py`` go into
``evermind_memory_emb_<dim>`` through ``PgVectorStore.put_embeddings`` (batches of 10⁴), the
HNSW index is built by ``build_embedding_index`` (as the store's background build does), and
each query asks ``nearest_embeddings`` for ``max(4k, 64)`` candidates, which are rescored
exactly here (numpy, as ``ServedVectorIndex`` does on its matrix); recall@k is against the
exact float64 top k. A real PostgreSQL 16 from pgserver in a temporary folder, stopped at the
end (and on Ctrl-C). Measures, asserts nothing.

Usage:
    nice -n 10 .venv/bin/python -m benchmarks.memory_pgvector_hnsw --n 1000000 --queries 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.children import stop_postgres
from benchmarks.vectorstore_scale import _around, exact_top_k, synthetic


async def measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    from evermind.vectorstore import open_store

    clusters = max(10, min(5000, args.n // 100))
    vectors, _, centres = synthetic(args.n, args.dim, clusters, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    queries = _around(centres, rng.integers(0, clusters, size=args.queries), rng)
    truth = exact_top_k(vectors, queries, args.k)
    store: Any = await open_store(url, dim=32, name="evermind_memory", vector_index=False)
    row: dict[str, Any] = {"n": args.n, "dim": args.dim, "queries": args.queries}
    start = time.perf_counter()
    for first in range(0, args.n, 10_000):
        last = min(args.n, first + 10_000)
        await store.put_embeddings(
            "bench", "fp", {f"h{i}": vectors[i].tolist() for i in range(first, last)}
        )
    row["put_s"] = time.perf_counter() - start
    start = time.perf_counter()
    row["built"] = await store.build_embedding_index(args.dim, wait=True)
    row["build_s"] = time.perf_counter() - start
    want = max(4 * args.k, 64)
    times, recalls = [], []
    await store.nearest_embeddings("bench", "fp", queries[0].tolist(), want)  # warm-up
    for query, expected in zip(queries, truth, strict=True):
        start = time.perf_counter()
        hashes = await store.nearest_embeddings("bench", "fp", query.tolist(), want)
        rows = np.array([int(h[1:]) for h in hashes])
        best = rows[np.argsort(-(vectors[rows] @ query), kind="stable")[: args.k]]
        times.append((time.perf_counter() - start) * 1000)
        recalls.append(len(set(best.tolist()) & set(expected.tolist())) / args.k)
    row["query_p50_ms"] = float(np.percentile(times, 50))
    row["query_p99_ms"] = float(np.percentile(times, 99))
    row["recall_at_k"] = float(np.mean(recalls))
    await store.close()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory_pgvector_hnsw")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import pgserver

    with tempfile.TemporaryDirectory(prefix="evermind-pghnsw-") as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")  # type: ignore[attr-defined]
        try:
            print(json.dumps(asyncio.run(measure(args, server.get_uri()))))
        finally:
            server.cleanup()
            stop_postgres(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
