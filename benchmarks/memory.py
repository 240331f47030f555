#!/usr/bin/env python3
"""Benchmarks the memory store: write throughput, recall latency, numpy vs pure-Python search.

Synthetic memories (random words from a fixed vocabulary, seeded) are bulk-loaded into a
temporary SQLite store; then lexical and hybrid recall are timed. The embedder is a seeded
random projection of hashed words (a benchmark stand-in, not a model). Absolute times depend on
the machine; compare the ratios printed in one run.

Usage:
    .venv/bin/python -m benchmarks.memory                 # sizes 1000, 10000
    .venv/bin/python -m benchmarks.memory --sizes 50000 --dim 384
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
try:
    import evermind  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from evermind.memory import MemoryStore, RecallOptions  # noqa: E402
from evermind.search.vectors import VectorIndex  # noqa: E402

WORDS = [f"w{i}" for i in range(5000)] + ["TSR-417", "db-prod-01", "deploy", "route", "depot"]


class ProjectionEmbedder:
    """Hashed bag of words times a fixed random matrix (seeded): fast and deterministic."""

    fingerprint = "bench-projection-v1"

    def __init__(self, dim: int) -> None:
        self.matrix = np.random.default_rng(0).standard_normal((4096, dim)).astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.matrix.shape[1]), dtype=np.float32)
        for i, text in enumerate(texts):
            ids = [zlib.crc32(w.encode()) % 4096 for w in text.split()]
            rows[i] = self.matrix[ids].sum(axis=0)
        return rows


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(8, 30))) for _ in range(n)]


async def bench_size(n: int, dim: int, queries: int) -> None:
    corpus = texts(n, seed=n)
    probes = texts(queries, seed=-n)
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "bench.db", ProjectionEmbedder(dim))
        entries = [{"key": f"m{i}", "content": c} for i, c in enumerate(corpus)]
        started = time.perf_counter()
        await store.import_(entries)  # one transaction
        bulk = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(200):
            await store.remember(f"single{i}", corpus[i])
        single = (time.perf_counter() - started) / 200
        await store.recall("warm up", top_k=5)  # embeds everything not cached yet
        results = {}
        for name, options in (
            ("lexical", RecallOptions(semantic=False)),
            ("hybrid", RecallOptions()),
            ("hybrid, no mmr", RecallOptions(mmr=False)),
        ):
            times = []
            for probe in probes:
                started = time.perf_counter()
                await store.recall(probe, top_k=5, options=options)
                times.append(time.perf_counter() - started)
            results[name] = statistics.median(times) * 1000
        await store.close()
    print(
        f"n={n:>6} dim={dim}: bulk import {n / bulk:,.0f}/s, single remember "
        f"{single * 1000:.2f} ms, recall median "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in results.items())
    )


def bench_scan(n: int, dim: int) -> None:
    rng = np.random.default_rng(1)
    data = rng.standard_normal((n, dim)).astype(np.float32)
    query = rng.standard_normal(dim).astype(np.float32).tolist()
    timings = {}
    for use_numpy in (True, False):
        if not use_numpy and n > 20000:
            continue  # the pure-Python scan is slow at this size; numpy only
        index = VectorIndex(use_numpy=use_numpy)
        for i, row in enumerate(data):
            index.add(f"k{i}", row.tolist())
        runs = []
        for _ in range(5):  # the first call pays one-off warm-up (BLAS threads, caches)
            started = time.perf_counter()
            index.search(query, 5)
            runs.append(time.perf_counter() - started)
        timings["numpy" if use_numpy else "python"] = statistics.median(runs) * 1000
    shown = ", ".join(f"{k} {v:.1f} ms" for k, v in timings.items())
    print(f"exact scan n={n} dim={dim}: {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    for n in (int(s) for s in args.sizes.split(",")):
        asyncio.run(bench_size(n, args.dim, args.queries))
        bench_scan(n, args.dim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
