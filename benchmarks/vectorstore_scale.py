#!/usr/bin/env python3
"""The vector stores at scale: the embedded store against Postgres + pgvector, side by side.

Synthetic chunks are loaded through the store port (``VectorStore.upsert``, the path
``evermind ingest`` takes) into each engine: ``memory://`` and ``sqlite:///`` (the embedded
store: an exact numpy scan over what it holds in memory) and Postgres + pgvector (a real
PostgreSQL 16 from ``pgserver``, HNSW with ``vector_cosine_ops``). Reported per engine:
ingest throughput (items/s), the time to open a store that already holds the items (SQLite:
it loads everything; Postgres: a connection), query latency p50/p99 over ``--queries``
queries (one at a time, k = ``--k``), recall@k against an exact float64 numpy scan of the
same vectors, and memory (the embedded store's resident growth; Postgres' table + indexes).

The data: ``--n`` unit vectors of ``--dim`` dimensions in ``--clusters`` clusters (a random
centre each, plus Gaussian noise, normalised), the shape real embeddings have (topics), with
a short text each (its cluster's words, so Postgres' generated tsvector has real text to
index); queries are fresh draws from the same clusters, not stored items. The default
dimension is 64: the embedded store keeps each vector as a tuple of Python floats beside its
float32 matrix (about 2.3 KB an item at 64, 12 KB at 384), so 10⁶ × 384 would need ~12 GB on
a 24 GB machine shared by everyone; pass ``--dim 384`` (MiniLM's size) at 10⁵ to see the
effect of a wider vector.

Usage:
    .venv/bin/python -m benchmarks.vectorstore_scale --n 100000
    .venv/bin/python -m benchmarks.vectorstore_scale --n 1000000 --ingest-budget-s 600 --json
    evermind bench vectorstore --n 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
try:
    import evermind  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from evermind.vectorstore import AccessScope, Acl, VectorItem, VectorStore, open_store  # noqa: E402

ENGINES = ("memory", "sqlite", "pgvector")
ACL = Acl("bench", frozenset({"everyone"}))
SCOPE = AccessScope("bench", frozenset({"everyone"}))
TOPIC_WORDS = 6  # words per cluster vocabulary


def synthetic(
    n: int, dim: int, clusters: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` clustered unit vectors (float32, (n, dim)), their cluster, and the centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.integers(0, clusters, size=n)
    vectors = _around(centres, labels, rng)
    return vectors, labels, centres


def _around(centres: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors near ``centres[labels]``: noise of norm ~0.6 around a unit centre."""
    dim = centres.shape[1]
    out = np.empty((len(labels), dim), dtype=np.float32)
    for start in range(0, len(labels), 65536):  # in blocks: float64 temporaries stay small
        part = labels[start : start + 65536]
        block = centres[part] + rng.standard_normal((len(part), dim)) * (0.6 / np.sqrt(dim))
        out[start : start + len(part)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def chunk_text(i: int, label: int) -> str:
    """A short text for chunk ``i`` of cluster ``label`` (its topic words and a number)."""
    words = " ".join(f"topic{label}w{j}" for j in range((i % TOPIC_WORDS) + 1))
    return f"chunk {i} about {words}"


def exact_top_k(matrix: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the ``k`` best rows per query by cosine, in float64 (the truth)."""
    truth = np.empty((len(queries), k), dtype=np.int64)
    q64 = queries.astype(np.float64)
    for start in range(0, len(queries), 16):  # (16, N) scores at a time
        scores = q64[start : start + 16] @ matrix.T.astype(np.float64, copy=False)
        best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(scores, best, axis=1).argsort(axis=1)[:, ::-1]
        truth[start : start + 16] = np.take_along_axis(best, order, axis=1)
    return truth


def numpy_scan_ms(matrix: np.ndarray, queries: np.ndarray, k: int) -> float:
    """p50 of one float32 matrix-vector scan plus top-k (ms): the floor of an exact scan."""
    times = []
    for query in queries[:50]:
        start = time.perf_counter()
        scores = matrix @ query
        best = np.argpartition(-scores, k - 1)[:k]
        best[np.argsort(-scores[best])]
        times.append(time.perf_counter() - start)
    return float(np.percentile(np.asarray(times) * 1000, 50))


def rss_mb() -> float:
    """This process's resident memory, MB (Linux /proc; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def ingest(
    store: VectorStore,
    vectors: np.ndarray,
    labels: np.ndarray,
    batch: int,
    budget_s: float | None,
    engine: str,
) -> tuple[int, float]:
    """Upserts the chunks in batches; (how many went in, seconds). Stops past ``budget_s``."""
    n = len(vectors)
    start = time.perf_counter()
    step = max(batch, n // 10)
    done = 0
    while done < n:
        end = min(n, done + batch)
        items = [
            VectorItem(f"c{i}", vectors[i].tolist(), chunk_text(i, int(labels[i])), {}, ACL)
            for i in range(done, end)
        ]
        await store.upsert(items)
        done = end
        elapsed = time.perf_counter() - start
        if done % step < batch or done == n:
            log(f"  {engine}: {done}/{n} in {elapsed:.1f} s ({done / elapsed:.0f} items/s)")
        if budget_s is not None and elapsed > budget_s and done < n:
            log(f"  {engine}: ingest budget of {budget_s:g} s spent at {done}/{n}; stopping")
            break
    return done, time.perf_counter() - start


async def timed_queries(
    store: VectorStore, queries: np.ndarray, truth: np.ndarray, k: int
) -> dict[str, float]:
    """p50/p99 latency (ms) and mean recall@k of the queries, one at a time."""
    latencies, recalls = [], []
    for query, expected in zip(queries, truth, strict=True):
        start = time.perf_counter()
        hits = await store.query(query.tolist(), k, scope=SCOPE)
        latencies.append(time.perf_counter() - start)
        wanted = {f"c{j}" for j in expected}
        recalls.append(len(wanted & {h.id for h in hits}) / k)
    ms = np.asarray(latencies) * 1000
    return {
        "query_p50_ms": float(np.percentile(ms, 50)),
        "query_p99_ms": float(np.percentile(ms, 99)),
        "recall_at_k": float(np.mean(recalls)),
    }


async def pg_size_mb(url: str, table: str) -> float:
    """Postgres' table + indexes (+ TOAST) of ``table``, MB."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT pg_total_relation_size(%s::regclass)", [table])
        row = await cur.fetchone()
    return 0.0 if row is None else int(row[0]) / 2**20


async def pg_execute(url: str, statements: Sequence[str]) -> float:
    """Runs ``statements`` on a fresh connection (autocommit); seconds taken."""
    import psycopg

    start = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for statement in statements:
            await conn.execute(statement)
    return time.perf_counter() - start


def hnsw_sql(table: str) -> list[str]:
    """The engine's HNSW index on ``table``, built after the load (pgvector's advice)."""
    return [
        "SET maintenance_work_mem = '1GB'",
        "SET max_parallel_maintenance_workers = 0",  # one core: the box is shared
        f'CREATE INDEX "{table}_hnsw" ON "{table}" USING hnsw (embedding vector_cosine_ops)',
    ]


async def bench_engine(
    engine: str, url: str, data: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """One engine's row of the table."""
    vectors, labels, queries = data["vectors"], data["labels"], data["queries"]
    table = f"scale_{uuid.uuid4().hex[:10]}"
    before = rss_mb()
    log(f"{engine}: loading {len(vectors)} chunks (batches of {args.batch})")
    store = await open_store(url, dim=vectors.shape[1], name=table)
    index_after = engine == "pgvector" and not args.index_during_load
    if index_after:  # pgvector's docs: bulk-load first, then build the HNSW index
        await pg_execute(url, [f'DROP INDEX "{table}_hnsw"'])
    try:
        loaded, seconds = await ingest(
            store, vectors, labels, args.batch, args.ingest_budget_s, engine
        )
        row: dict[str, Any] = {"engine": engine, "loaded": loaded, "ingest_s": seconds}
        row["ingest_items_per_s"] = loaded / seconds if seconds > 0 else 0.0
        if index_after:
            log(f"  {engine}: building the HNSW index on {loaded} rows")
            row["index_build_s"] = await pg_execute(url, hnsw_sql(table))
            log(f"  {engine}: HNSW index built in {row['index_build_s']:.1f} s")
            # Fresh statistics, as autovacuum would gather later: without them the planner,
            # which now knows the row count but not that every row matches the ACL filter,
            # picks a bitmap scan + sort (an exact scan) over the HNSW index.
            row["analyze_s"] = await pg_execute(url, [f'ANALYZE "{table}"'])
        if loaded < len(vectors):
            row["projected_ingest_s"] = len(vectors) / row["ingest_items_per_s"]
        if engine == "sqlite":  # the embedded store loads everything when it opens
            await store.close()
            start = time.perf_counter()
            store = await open_store(url, dim=vectors.shape[1], name=table)
            row["open_s"] = time.perf_counter() - start
        truth = data["truth"]
        if loaded < len(vectors):  # the budget ran out: the truth of what was loaded
            truth = exact_top_k(vectors[:loaded], queries, args.k)
        row.update(await timed_queries(store, queries, truth, args.k))
        if engine == "pgvector":
            row["storage_mb"] = await pg_size_mb(url, table)
            await store.drop()  # type: ignore[attr-defined]
        else:
            row["rss_growth_mb"] = rss_mb() - before
    finally:
        await store.close()
    rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
    log(f"{engine}: {json.dumps(rounded)}")
    return row


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every engine asked for on one data set; the document the table is printed from."""
    clusters = args.clusters or max(10, min(5000, args.n // 100))
    start = time.perf_counter()
    vectors, labels, centres = synthetic(args.n, args.dim, clusters, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    queries = _around(centres, rng.integers(0, clusters, size=args.queries), rng)
    truth = exact_top_k(vectors, queries, args.k)
    spent = time.perf_counter() - start
    log(f"data: {args.n} x {args.dim} in {clusters} clusters, exact truth in {spent:.1f} s")
    data = {"vectors": vectors, "labels": labels, "queries": queries, "truth": truth}
    rows = []
    with tempfile.TemporaryDirectory(prefix="evermind-scale-") as folder:
        postgres = None
        try:
            for engine in args.engines:
                if engine == "pgvector" and postgres is None:
                    import pgserver

                    start_postgres = pgserver.get_server  # type: ignore[attr-defined]
                    postgres = start_postgres(Path(folder) / "pg", cleanup_mode="stop")
                url = {
                    "memory": "memory://",
                    "sqlite": f"sqlite:///{folder}/vectors.db",
                    "pgvector": None if postgres is None else postgres.get_uri(),
                }[engine]
                assert url is not None
                rows.append(await bench_engine(engine, url, data, args))
        finally:
            if postgres is not None:
                postgres.cleanup()
    return {
        "numpy_scan_p50_ms": numpy_scan_ms(vectors, queries, args.k),
        "n": args.n,
        "dim": args.dim,
        "clusters": clusters,
        "queries": args.queries,
        "k": args.k,
        "batch": args.batch,
        "rows": rows,
    }


def format_table(doc: dict[str, Any]) -> str:
    """The rows side by side, as a Markdown table."""
    k = doc["k"]
    lines = [
        f"n = {doc['n']}, dim = {doc['dim']}, {doc['clusters']} clusters, {doc['queries']} "
        f"queries, k = {k}, batches of {doc['batch']}; one bare float32 numpy scan + top-{k}: "
        f"{doc.get('numpy_scan_p50_ms', float('nan')):.2f} ms (p50)",
        "",
        f"| engine | loaded | ingest items/s | ingest s | open s | query p50 ms | query p99 ms "
        f"| recall@{k} | memory MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in doc["rows"]:
        ingest_s = f"{row['ingest_s']:.1f}"
        if "projected_ingest_s" in row:
            ingest_s += f" (all: ~{row['projected_ingest_s']:.0f})"
        memory = row.get("storage_mb", row.get("rss_growth_mb", 0.0))
        where = "on disk" if "storage_mb" in row else "RSS growth"
        open_s = f"{row['open_s']:.2f}" if "open_s" in row else "–"
        if "index_build_s" in row:
            ingest_s += f" + HNSW {row['index_build_s']:.1f}"
        lines.append(
            f"| {row['engine']} | {row['loaded']} | {row['ingest_items_per_s']:.0f} | {ingest_s} "
            f"| {open_s} | {row['query_p50_ms']:.2f} | {row['query_p99_ms']:.2f} "
            f"| {row['recall_at_k']:.3f} | {memory:.0f} ({where}) |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.vectorstore_scale",
        description="Ingest throughput, query latency and recall@k of the embedded vector "
        "store and Postgres + pgvector on synthetic clustered chunks.",
    )
    parser.add_argument("--n", type=int, default=100_000, help="chunks (default 100000)")
    parser.add_argument("--dim", type=int, default=64, help="dimensions (default 64; see --help)")
    parser.add_argument("--clusters", type=int, default=0, help="clusters (0: n/100, 10..5000)")
    parser.add_argument("--queries", type=int, default=200, help="queries timed (default 200)")
    parser.add_argument("--k", type=int, default=10, help="results per query (default 10)")
    parser.add_argument("--batch", type=int, default=1000, help="items per upsert (default 1000)")
    parser.add_argument(
        "--engines",
        type=lambda text: [e.strip() for e in text.split(",") if e.strip()],
        default=list(ENGINES),
        help="comma-separated, of memory, sqlite, pgvector (default: all)",
    )
    parser.add_argument(
        "--ingest-budget-s",
        type=float,
        default=None,
        help="stop an engine's ingest after this many seconds; the rest is projected and the "
        "queries run on what was loaded",
    )
    parser.add_argument(
        "--index-during-load",
        action="store_true",
        help="pgvector: keep the HNSW index while loading (default: build it after the load)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; prints the table (or JSON); returns the exit status."""
    args = build_parser().parse_args(argv)
    unknown = sorted(set(args.engines) - set(ENGINES))
    if unknown or not args.engines:
        expected = f"expected some of {list(ENGINES)}, got {args.engines}"
        print(f"error: --engines: {expected}", file=sys.stderr)
        return 2
    if args.n < args.k or args.k < 1 or args.queries < 1 or args.batch < 1 or args.dim < 2:
        print("error: expected n >= k >= 1, queries >= 1, batch >= 1, dim >= 2", file=sys.stderr)
        return 2
    doc = asyncio.run(run(args))
    print(json.dumps(doc, indent=2) if args.json else format_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
