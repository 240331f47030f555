#!/usr/bin/env python3
"""The memory store at 10⁴–10⁶ memories beside sqlite-vec and chroma: load, recall, RSS.

The same memories (clustered unit vectors, the data of ``benchmarks/vectorstore_scale.py``,
each with a short text of its cluster's words) go into:

- ``sqlite``: ``MemoryStore`` on its SQLite backend (``MemoryStore(path, embedder)``), loaded
  with ``import_`` in batches of ``--batch`` (each batch one transaction, embedded in one call);
- ``postgres``: ``MemoryStore`` on ``VectorStoreBackend`` over Postgres + pgvector (a real
  PostgreSQL 16 from ``pgserver``), loaded the same way, as ``--store`` opens it: the
  embeddings go to the memory's embedding table too, and past ``SERVED_MIN_ROWS`` (2·10⁵)
  vectors recall starts from the candidates of its HNSW index (built once in the database,
  after the load: "graph wait"), rescored in process (``search/served.py``); below, the
  in-process index;
- ``postgres-served``: the same with the pgvector path from 2·10⁴ vectors on;
- ``postgres-inprocess``: the same with the in-process index only (the exact scan, then
  usearch's graph past 2·10⁴, built in this process: "graph wait");
- ``sqlite-vec``: a ``vec0`` table (through ``apsw``: this CPython's ``sqlite3`` cannot load
  extensions) with the text beside it, rows inserted in one transaction per batch;
- ``chroma``: a chromadb ``PersistentClient`` collection (HNSW, cosine space), ``add`` in
  batches of at most its ``max_batch_size``.

The embedder is a table: a memory's text maps to its vector (so no model time is measured,
only the stores'); it returns an (N, D) numpy array, as real embedders do. Recall: ``--queries``
fresh draws from the same clusters, one at a time, k = 10 — for our stores
``MemoryStore.recall`` with only its semantic ranker (no BM25, MMR, importance or recency, so
its top 10 is comparable with the exact cosine top 10), and the bare index search
(``vector_index.search``) beside it; recall@10 is against an exact float64 numpy scan. The
first recall, which loads the snapshot and starts building the approximate index in the
background (past 2·10⁴ memories), is timed on its own, and so is the wait for that build.

Each load logs every batch's seconds (``batch_s`` in the JSON: flat when a batch's cost does
not grow with the store). After the queries, ``--single-writes`` more memories are written one
``import_`` each (p50/p99 ms) and ``--import-after`` more in batches (memories/s); on Postgres
past 2·10⁵ both land in an embedding table whose HNSW index the queries built, and the row says
whether the index is still there after each.

Each engine runs in its own process (``--child``), so its RSS growth over the data alone is its
own: reported per 10⁵ entries. Postgres' own memory is another process: its table's size on
disk is reported instead. A load that passes ``--budget-s`` stops; the rest is projected and
the queries run on what was loaded.

Benchmarks measure; they assert nothing. Run it under ``nice`` on a shared machine.

Usage:
    .venv/bin/python -m benchmarks.memory_scale --n 10000
    .venv/bin/python -m benchmarks.memory_scale --n 100000 --engines sqlite,sqlite-vec --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
try:
    import evermind  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from benchmarks.children import run_child  # noqa: E402
from benchmarks.vectorstore_scale import (  # noqa: E402
    _around,
    chunk_text,
    exact_top_k,
    rss_mb,
    synthetic,
)

ENGINES = ("sqlite", "postgres", "postgres-served", "postgres-inprocess", "sqlite-vec", "chroma")
POSTGRES = ("postgres", "postgres-served", "postgres-inprocess")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class TableEmbedder:
    """Maps each known text to its vector: the stores' cost, not a model's, is measured."""

    fingerprint = "bench-table-v1"

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.row = {text: i for i, text in enumerate(texts)}
        self.vectors = vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.vectors[[self.row[t] for t in texts]]  # (N, D)


def dataset(args: argparse.Namespace) -> dict[str, Any]:
    """The memories, queries and the exact truth, the same in every process (seeded)."""
    clusters = args.clusters or max(10, min(5000, args.n // 100))
    vectors, labels, centres = synthetic(args.n, args.dim, clusters, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    queries = _around(centres, rng.integers(0, clusters, size=args.queries), rng)
    texts = [chunk_text(i, int(labels[i])) for i in range(args.n)]
    query_texts = [f"query {j}" for j in range(args.queries)]
    # The memories written after the load (--single-writes, then --import-after), from the
    # same clusters.
    more = args.single_writes + args.import_after
    labels_more = rng.integers(0, clusters, size=more)
    return {
        "more_vectors": _around(centres, labels_more, rng).astype(np.float32),
        "more_texts": [chunk_text(args.n + i, int(label)) for i, label in enumerate(labels_more)],
        "clusters": clusters,
        "vectors": vectors,
        "texts": texts,
        "queries": queries,
        "query_texts": query_texts,
        "truth": exact_top_k(vectors, queries, args.k),
    }


def latencies(ms: list[float]) -> dict[str, float]:
    values = np.asarray(ms)
    return {"p50_ms": float(np.percentile(values, 50)), "p99_ms": float(np.percentile(values, 99))}


# ---------------------------------------------------------------------- our store


async def bench_memory_store(
    engine: str, data: dict[str, Any], args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    """Our store: SQLite as ``MemoryStore(path)`` opens it, Postgres as ``--store`` does."""
    from evermind.memory import MemoryStore
    from evermind.vectorstore.shared import MEMORY_TABLE

    table = TableEmbedder(
        [*data["texts"], *data["query_texts"], *data["more_texts"]],
        np.vstack([data["vectors"], data["queries"], data["more_vectors"]]),
    )
    if engine == "sqlite":
        async with MemoryStore(folder / "memory.db", table) as store:
            return await measure_memory_store(store, engine, data, args)
    import pgserver

    from evermind.memory.shared_memory import SharedMemory
    from evermind.search.ann import ANN_MIN_ROWS
    from evermind.search.vectors import VectorIndex

    postgres = pgserver.get_server(folder / "pg", cleanup_mode="stop")  # type: ignore[attr-defined]
    try:
        url = postgres.get_uri()
        async with SharedMemory(url, table, namespace="bench") as shared:
            backend = shared.store("bench").backend
            # postgres: as --store opens it (past SERVED_MIN_ROWS vectors recall starts from
            # pgvector's HNSW); postgres-served: from 2·10⁴ on (the in-process graph's own
            # threshold); postgres-inprocess: the in-process index (exact, then usearch's graph).
            index = VectorIndex() if engine == "postgres-inprocess" else None
            served = ANN_MIN_ROWS if engine == "postgres-served" else None
            async with MemoryStore(
                backend, table, vector_index=index, served_min_rows=served
            ) as store:
                row = await measure_memory_store(store, engine, data, args)
        row["storage_mb"] = await pg_size_mb(url, MEMORY_TABLE)
        row["embeddings_mb"] = await pg_size_mb(url, f"{MEMORY_TABLE}_emb_{args.dim}")
        return row
    finally:
        postgres.cleanup()


async def measure_memory_store(
    store: Any, engine: str, data: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    from evermind.memory import RecallOptions
    from evermind.search.served import ServedVectorIndex

    row: dict[str, Any] = {"engine": engine}
    row.update(await load_memories(store, data, args, engine))
    loaded = row["loaded"]
    truth = data["truth"]
    if loaded < args.n:
        truth = exact_top_k(data["vectors"][:loaded], data["queries"], args.k)
    semantic = RecallOptions(lexical=False, mmr=False, importance=False, recency=False)
    start = time.perf_counter()
    await store.recall(data["query_texts"][0], top_k=args.k, options=semantic)
    row["first_recall_s"] = time.perf_counter() - start
    start = time.perf_counter()  # the first recall started the graph's build: wait for it
    if isinstance(store.vector_index, ServedVectorIndex):  # Postgres builds its HNSW index
        row["graph"] = await store.backend.build_served_index(args.dim)
    else:
        row["graph"] = store.vector_index.build_graph()
    row["graph_wait_s"] = time.perf_counter() - start
    times, index_times, recalls = [], [], []
    for query, text, expected in zip(data["queries"], data["query_texts"], truth, strict=True):
        start = time.perf_counter()
        hits = await store.recall(text, top_k=args.k, options=semantic)
        times.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        await store.vector_index.asearch(query.tolist(), args.k)  # as recall asks it
        index_times.append((time.perf_counter() - start) * 1000)
        wanted = {f"m{j}" for j in expected}
        recalls.append(len(wanted & {h.key for h in hits}) / args.k)
    row.update({f"recall_{k}": v for k, v in latencies(times).items()})
    row.update({f"index_{k}": v for k, v in latencies(index_times).items()})
    row["recall_at_k"] = float(np.mean(recalls))
    row["index_scan"] = store.vector_index.last_scan
    # What is measured so far, in case --timeout-s stops the writes below.
    log(f"  {engine}: " + json.dumps({k: v for k, v in row.items() if k != "batch_s"}))
    row.update(await write_more(store, data, args, engine))
    return row


async def write_more(
    store: Any, data: dict[str, Any], args: argparse.Namespace, engine: str
) -> dict[str, Any]:
    """After the queries (on Postgres past 2·10⁵, with the embedding table's HNSW index
    built): ``--single-writes`` memories one ``import_`` each, then ``--import-after`` more
    in batches of ``--batch``; each timed, with whether the HNSW index is there after."""
    from evermind.memory import RecallOptions

    row: dict[str, Any] = {}
    texts, n = data["more_texts"], args.n
    ready = getattr(store.backend, "_store", None)
    ready = getattr(ready, "embedding_index_ready", None)
    if args.single_writes:
        times = []
        for i in range(args.single_writes):
            entry = {"key": f"m{n + i}", "content": texts[i], "importance": 0.5}
            start = time.perf_counter()
            await store.import_([entry])
            times.append((time.perf_counter() - start) * 1000)
            if (i + 1) % 1000 == 0:
                log(f"  {engine}: {i + 1}/{args.single_writes} single writes")
        row.update({f"single_write_{k}": v for k, v in latencies(times).items()})
        row["single_writes_per_s"] = len(times) / (sum(times) / 1000)
        if ready is not None:
            row["index_after_single_writes"] = await ready(args.dim)
        log(f"  {engine}: " + json.dumps(row))
    if args.import_after:
        first = args.single_writes
        start = time.perf_counter()
        for lo in range(first, first + args.import_after, args.batch):
            hi = min(first + args.import_after, lo + args.batch)
            await store.import_(
                [
                    {"key": f"m{n + i}", "content": texts[i], "importance": 0.5}
                    for i in range(lo, hi)
                ]
            )
        seconds = time.perf_counter() - start
        row["import_after_s"] = seconds
        row["import_after_per_s"] = args.import_after / seconds
        if ready is not None:
            row["index_after_import"] = await ready(args.dim)
        semantic = RecallOptions(lexical=False, mmr=False, importance=False, recency=False)
        start = time.perf_counter()
        await store.recall(data["query_texts"][0], top_k=args.k, options=semantic)
        row["recall_after_import_ms"] = (time.perf_counter() - start) * 1000
        row["scan_after_import"] = store.vector_index.last_scan
    return row


async def load_memories(
    store: Any, data: dict[str, Any], args: argparse.Namespace, engine: str
) -> dict[str, Any]:
    """``import_`` in batches (each one transaction); stops past ``--budget-s``."""
    texts, n = data["texts"], args.n
    start = time.perf_counter()
    done = 0
    batch_s: list[float] = []  # each import_'s seconds: flat when a batch's cost is not O(table)
    while done < n:
        end = min(n, done + args.batch)
        began = time.perf_counter()
        await store.import_(
            [{"key": f"m{i}", "content": texts[i], "importance": 0.5} for i in range(done, end)]
        )
        batch_s.append(time.perf_counter() - began)
        done = end
        elapsed = time.perf_counter() - start
        log(
            f"  {engine}: {done}/{n} in {elapsed:.1f} s ({done / elapsed:.0f} memories/s; "
            f"this batch {batch_s[-1]:.2f} s)"
        )
        if args.budget_s is not None and elapsed > args.budget_s and done < n:
            log(f"  {engine}: load budget of {args.budget_s:g} s spent at {done}/{n}; stopping")
            break
    seconds = time.perf_counter() - start
    return {"loaded": done, "load_s": seconds, "load_per_s": done / seconds, "batch_s": batch_s}


async def pg_size_mb(url: str, table: str) -> float:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT pg_total_relation_size(%s::regclass)", [table])
        found = await cur.fetchone()
    return 0.0 if found is None else int(found[0]) / 2**20


# ---------------------------------------------------------------------- the others


def bench_sqlite_vec(data: dict[str, Any], args: argparse.Namespace, folder: Path) -> dict:
    import apsw
    import sqlite_vec

    db = apsw.Connection(str(folder / "vec.db"))
    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    db.execute(
        f"CREATE VIRTUAL TABLE memories USING vec0(embedding float[{args.dim}] "
        "distance_metric=cosine, +key text, +content text)"
    )
    vectors, texts = data["vectors"], data["texts"]
    start = time.perf_counter()
    done = 0
    while done < args.n:
        end = min(args.n, done + args.batch)
        with db:
            db.executemany(
                "INSERT INTO memories(rowid, embedding, key, content) VALUES (?, ?, ?, ?)",
                ((i, vectors[i].tobytes(), f"m{i}", texts[i]) for i in range(done, end)),
            )
        done = end
        if args.budget_s is not None and time.perf_counter() - start > args.budget_s:
            break
    seconds = time.perf_counter() - start
    row: dict[str, Any] = {"engine": "sqlite-vec", "loaded": done, "load_s": seconds}
    row["load_per_s"] = done / seconds
    statement = (
        "SELECT key, content, distance FROM memories WHERE embedding MATCH ? AND k = ? "
        "ORDER BY distance"
    )

    def search(query: np.ndarray) -> list[str]:
        return [r[0] for r in db.execute(statement, (query.tobytes(), args.k)).fetchall()]

    row.update(timed(search, data, args, done))
    return row


def bench_chroma(data: dict[str, Any], args: argparse.Namespace, folder: Path) -> dict:
    import chromadb

    client = chromadb.PersistentClient(path=str(folder / "chroma"))
    collection = client.create_collection(
        "memories", metadata={"hnsw:space": "cosine"}, embedding_function=None
    )
    step = min(args.batch, client.get_max_batch_size())
    vectors, texts = data["vectors"], data["texts"]
    start = time.perf_counter()
    done = 0
    while done < args.n:
        end = min(args.n, done + step)
        collection.add(
            ids=[f"m{i}" for i in range(done, end)],
            embeddings=vectors[done:end],
            documents=texts[done:end],
        )
        done = end
        if args.budget_s is not None and time.perf_counter() - start > args.budget_s:
            break
    seconds = time.perf_counter() - start
    row: dict[str, Any] = {"engine": "chroma", "loaded": done, "load_s": seconds}
    row["load_per_s"] = done / seconds

    def search(query: np.ndarray) -> list[str]:
        found = collection.query(query_embeddings=[query], n_results=args.k)
        return list(found["ids"][0])

    row.update(timed(search, data, args, done))
    return row


def timed(search: Any, data: dict[str, Any], args: argparse.Namespace, loaded: int) -> dict:
    truth = (
        data["truth"]
        if loaded == args.n
        else exact_top_k(data["vectors"][:loaded], data["queries"], args.k)
    )
    search(data["queries"][0])  # warm-up
    times, recalls = [], []
    for query, expected in zip(data["queries"], truth, strict=True):
        start = time.perf_counter()
        keys = search(query)
        times.append((time.perf_counter() - start) * 1000)
        recalls.append(len({f"m{j}" for j in expected} & set(keys)) / args.k)
    out = {f"recall_{k}": v for k, v in latencies(times).items()}
    out["recall_at_k"] = float(np.mean(recalls))
    return out


# ---------------------------------------------------------------------- driver


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One engine in this process: its row, with the RSS the engine added over the data."""
    data = dataset(args)
    gc.collect()
    before = rss_mb()
    with contextlib.ExitStack() as stack:
        # The parent's folder when it gave one (it stops a Postgres left there), else our own.
        folder = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="evermind-memscale-"))
        )
        if args.engine in ("sqlite", *POSTGRES):
            row = asyncio.run(bench_memory_store(args.engine, data, args, folder))
        elif args.engine == "sqlite-vec":
            row = bench_sqlite_vec(data, args, folder)
        else:
            row = bench_chroma(data, args, folder)
        grown = rss_mb() - before
    row["rss_growth_mb"] = grown
    row["rss_mb_per_1e5"] = grown * 1e5 / max(1, row["loaded"])
    row["clusters"] = data["clusters"]
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each engine in a child process, one after the other, on the same seeded data."""
    rows = []
    for engine in args.engines:
        log(f"{engine}: {args.n} memories of dim {args.dim}")
        command = [sys.executable, "-m", "benchmarks.memory_scale", "--child", engine]
        command += ["--n", str(args.n), "--dim", str(args.dim), "--queries", str(args.queries)]
        command += ["--k", str(args.k), "--batch", str(args.batch), "--seed", str(args.seed)]
        command += ["--clusters", str(args.clusters)]
        command += ["--single-writes", str(args.single_writes)]
        command += ["--import-after", str(args.import_after)]
        if args.budget_s is not None:
            command += ["--budget-s", str(args.budget_s)]
        # The child's folder is ours: on a timeout or Ctrl-C its process group is stopped and
        # so is any Postgres (pgserver) whose data directory it left there.
        with tempfile.TemporaryDirectory(prefix="evermind-memscale-") as tmp:
            try:
                done = run_child(
                    [*command, "--workdir", tmp],
                    cwd=ROOT,
                    timeout_s=args.timeout_s,
                    postgres_under=Path(tmp),
                )
            except subprocess.TimeoutExpired as err:
                said = str(err.stderr or "").strip().splitlines()[-5:]
                log("\n".join([f"{engine}: stopped after --timeout-s {args.timeout_s:g} s", *said]))
                rows.append({"engine": engine, "error": [f"timed out after {args.timeout_s} s"]})
                continue
        if done.returncode != 0:
            log(done.stderr[-2000:])
            rows.append({"engine": engine, "error": done.stderr.strip().splitlines()[-1:]})
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rounded = {
            k: round(v, 3) if isinstance(v, float) else v for k, v in row.items() if k != "batch_s"
        }
        log(f"{engine}: {json.dumps(rounded)}")
        rows.append(row)
    return {
        "n": args.n,
        "dim": args.dim,
        "queries": args.queries,
        "k": args.k,
        "batch": args.batch,
        "rows": rows,
    }


def format_table(doc: dict[str, Any]) -> str:
    k = doc["k"]
    lines = [
        f"n = {doc['n']}, dim = {doc['dim']}, {doc['queries']} queries, k = {k}, batches of "
        f"{doc['batch']}",
        "",
        f"| engine | loaded | load s | memories/s | first recall s | graph wait s "
        f"| recall p50 ms | recall p99 ms "
        f"| index p50 ms | index p99 ms | recall@{k} | RSS MB per 10⁵ | on disk MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in doc["rows"]:
        if "error" in row:
            lines.append(f"| {row['engine']} | failed: {row['error']} |")
            continue

        def cell(key: str, fmt: str = ".2f", row: dict[str, Any] = row) -> str:
            return "–" if key not in row else format(row[key], fmt)

        lines.append(
            f"| {row['engine']} | {row['loaded']} | {cell('load_s', '.1f')} "
            f"| {cell('load_per_s', '.0f')} | {cell('first_recall_s')} | {cell('graph_wait_s')} "
            f"| {cell('recall_p50_ms')} "
            f"| {cell('recall_p99_ms')} | {cell('index_p50_ms')} | {cell('index_p99_ms')} "
            f"| {cell('recall_at_k', '.3f')} | {cell('rss_mb_per_1e5', '.0f')} "
            f"| {cell('storage_mb', '.0f')} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory_scale",
        description="Load time, recall latency and recall@k of the memory store (SQLite, "
        "Postgres) beside sqlite-vec and chroma, on the same memories.",
    )
    parser.add_argument("--n", type=int, default=10_000, help="memories (default 10000)")
    parser.add_argument("--dim", type=int, default=64, help="dimensions (default 64)")
    parser.add_argument("--clusters", type=int, default=0, help="0: n/100, 10..5000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10_000, help="memories per write")
    parser.add_argument("--budget-s", type=float, default=None, help="stop a load after this")
    parser.add_argument(
        "--single-writes",
        type=int,
        default=0,
        help="after the queries: write this many more memories one import_ each, timed",
    )
    parser.add_argument(
        "--import-after",
        type=int,
        default=0,
        help="then import this many more in batches of --batch (Postgres: into the table "
        "whose HNSW index the queries built), timed",
    )
    parser.add_argument(
        "--engines",
        type=lambda text: [e.strip() for e in text.split(",") if e.strip()],
        default=list(ENGINES),
        help=f"comma-separated, of {', '.join(ENGINES)} (default: all)",
    )
    parser.add_argument(
        "--timeout-s", type=float, default=None, help="stop an engine's child after this"
    )
    parser.add_argument("--child", dest="engine", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    unknown = sorted(set(args.engines) - set(ENGINES))
    if unknown or args.n < args.k or args.k < 1 or args.queries < 1 or args.batch < 1:
        print(f"error: expected engines among {list(ENGINES)}, n >= k >= 1", file=sys.stderr)
        return 2
    if args.engine is not None:
        print(json.dumps(child(args)))
        return 0
    doc = run(args)
    print(json.dumps(doc, indent=2) if args.json else format_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
