#!/usr/bin/env python3
"""Benchmarks write-through cognition against the plain put on a SQLite store of N memories.

Seeded synthetic memories (random words, each with a number) are bulk-loaded; then 60 writes
go through ``MemoryStore.remember`` (the plain put) and 60 through ``remember_through`` (the
reconcile: exact key, folded key and alias lookups, a BM25 recall of the new text, the
same-subject rule), lexical only. Absolute times depend on the machine; compare the two
figures printed in one run.

Usage:
    .venv/bin/python -m benchmarks.write_through                # 10000 memories
    .venv/bin/python -m benchmarks.write_through --size 50000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
try:
    import evermind  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

from evermind.memory import MemoryRecord, MemoryStore  # noqa: E402
from evermind.memory.write_through import Remember, remember_through  # noqa: E402

WRITES = 60


async def _timed(write: Callable[[int], Awaitable[object]]) -> tuple[float, float]:
    times = []
    for number in range(WRITES):
        start = time.perf_counter()
        await write(number)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[WRITES // 2] * 1e3, times[int(WRITES * 0.95)] * 1e3


async def run(size: int) -> None:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(3000)]
    now = time.time()
    records = [
        MemoryRecord(
            f"note-{i}",
            " ".join(rng.choice(words) for _ in range(12)) + f" value {i}",
            created_at=now,
            updated_at=now,
        )
        for i in range(size)
    ]
    with tempfile.TemporaryDirectory() as folder:
        store = MemoryStore(Path(folder) / "memory.db")
        await store.write(records)
        await store.recall("warm up", top_k=3)
        plain = await _timed(lambda i: store.remember(f"k-{i}", f"w1 w2 w{i} port {i}"))
        reconciled = await _timed(
            lambda i: remember_through(store, Remember.of(f"r-{i}", f"w1 w2 w{i} port {i}"))
        )
        await store.close()
    print(f"{size} memories, {WRITES} writes each (p50 / p95 ms):")
    print(f"  plain put (MemoryStore.remember)    {plain[0]:6.1f} / {plain[1]:6.1f}")
    print(f"  write-through (remember_through)    {reconciled[0]:6.1f} / {reconciled[1]:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000, help="memories in the store")
    asyncio.run(run(parser.parse_args().size))


if __name__ == "__main__":
    main()
