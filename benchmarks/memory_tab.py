#!/usr/bin/env python3
"""Recall and cache-lookup latency: natively at 1k/10k/100k, in the Studio tab at 1k/10k.

Native (default): memories are synthetic (seeded random words, 8-30 per memory) bulk-loaded
into a SQLite ``MemoryStore`` with a 128-d seeded projection embedder (the nano model's
width; a stand-in so that 100k memories load in seconds — the time to embed one query with the
real model is measured separately with ``--model``). Reported: recall p50/p95 lexical-only and
hybrid (numpy exact scan); cache lookup p50 of the tab's cache run natively (``TabCache``:
character-trigram vectors, numpy scan, default guards) and of ``SemanticCache`` (pure-Python
L1 scan, projection vectors; up to 10k entries, because its store is O(n) per call).

Browser (``--browser``): the same memories are imported into the Studio page (IndexedDB) through
``memory_import``; recall is timed in the page around ``window.evermind.call('memory_recall')``
(so the worker round trip is included), lexical before a model exists and hybrid with the GPU
scan after training the tiny model of the browser test (d_model 16, 2 layers) in the tab;
``cache_lookup`` likewise after ``cache_import``. SwiftShader runs WebGPU on the CPU here, so
absolute browser numbers are upper bounds; compare ratios within one run.

Usage::

    .venv/bin/python -m benchmarks.memory_tab --sizes 1000,10000,100000 --model /tmp/d.evermind
    .venv/bin/python -m benchmarks.memory_tab --browser --sizes 1000,10000
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
try:
    import evermind  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

from evermind.cache import SemanticCache  # noqa: E402
from evermind.memory import MemoryStore, RecallOptions  # noqa: E402
from evermind.studio.storage import MemoryKV  # noqa: E402
from evermind.studio.tab_memory import TabCache  # noqa: E402

WORDS = [f"w{i}" for i in range(5000)] + ["TSR-417", "db-prod-01", "deploy", "route", "depot"]
DIM = 128
#: Largest size at which SemanticCache is filled too (its store is O(n) per call).
SEMANTIC_CACHE_MAX = 10_000


def _bench_memory_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_memory", ROOT / "benchmarks" / "memory.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def texts(n: int, seed: int) -> list[str]:
    """``n`` seeded synthetic memories."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(8, 30))) for _ in range(n)]


def questions(n: int, seed: int) -> list[str]:
    """Seeded cache queries shaped like questions (numbers differ, so guards have work)."""
    rng = random.Random(seed)
    return [
        f"how do I {rng.choice(['deploy', 'route', 'reset', 'scale'])} "
        f"{' '.join(rng.choices(WORDS[:5000], k=4))} {rng.randint(1, 99)}?"
        for _ in range(n)
    ]


def pct(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` in milliseconds (values are seconds)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def native_size(n: int, queries: int, embedder: Any) -> dict[str, float]:
    """Native recall and cache-lookup timings at ``n`` memories / cache entries."""
    corpus, probes = texts(n, seed=n), texts(queries, seed=n + 1)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "bench.db", embedder)
        started = time.perf_counter()
        await store.import_([{"key": f"m{i}", "content": c} for i, c in enumerate(corpus)])
        await store.recall("warm up", top_k=5)  # embeds every memory once
        out["load_s"] = time.perf_counter() - started
        for name, options in (("lexical", RecallOptions(semantic=False)), ("hybrid", None)):
            times = []
            for probe in probes:
                started = time.perf_counter()
                await store.recall(probe, top_k=5, options=options)
                times.append(time.perf_counter() - started)
            out[f"{name}_p50"], out[f"{name}_p95"] = pct(times, 0.5), pct(times, 0.95)
        await store.close()
    cached = questions(n, seed=n + 2)
    lookups = questions(queries, seed=n + 3)
    # The tab's cache natively (numpy scan, trigram vectors, default guards), one import.
    tab_cache = TabCache(MemoryKV(), None, semantic=False)  # type: ignore[arg-type]
    await tab_cache.store_many([(q, "answer") for q in cached])
    times = []
    for query in lookups:
        started = time.perf_counter()
        await tab_cache.lookup(query)
        times.append(time.perf_counter() - started)
    out["tab_cache_p50"] = pct(times, 0.5)
    if n <= SEMANTIC_CACHE_MAX:
        # SemanticCache's store scans every entry (invalidate_exact): filling is O(n^2).
        vectors = dict(zip(cached + lookups, embedder.embed(cached + lookups), strict=True))
        cache = SemanticCache(lambda q: vectors[q], threshold=0.9, capacity=n, fingerprint="b")
        for query in cached:
            cache.store(query, "answer")
        times = []
        for query in lookups:
            started = time.perf_counter()
            cache.lookup(query)
            times.append(time.perf_counter() - started)
        out["cache_p50"] = pct(times, 0.5)
    return out


def run_native(sizes: list[int], queries: int, model: Path | None) -> None:
    embedder = _bench_memory_module().ProjectionEmbedder(DIM)
    print(
        "| memories | load + embed all (s) | recall p50 lexical (ms) | recall p95 lexical | "
        "recall p50 hybrid | recall p95 hybrid | tab cache lookup p50 (ms) | "
        "SemanticCache lookup p50 (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        r = asyncio.run(native_size(n, queries, embedder))
        semantic = f"{r['cache_p50']:.2f}" if "cache_p50" in r else "not run (O(n^2) fill)"
        print(
            f"| {n:,} | {r['load_s']:.1f} | {r['lexical_p50']:.2f} | {r['lexical_p95']:.2f} | "
            f"{r['hybrid_p50']:.2f} | {r['hybrid_p95']:.2f} | {r['tab_cache_p50']:.2f} | "
            f"{semantic} |",
            flush=True,
        )
    if model is not None:
        import evermind

        loaded = evermind.load(model)
        times = []
        for probe in texts(20, seed=7):
            started = time.perf_counter()
            loaded.embed([probe])
            times.append(time.perf_counter() - started)
        print(f"\nembedding one query with {model.name} (numpy CPU): p50 {pct(times, 0.5):.1f} ms")


PAGE_TIMER = """async ([fn, kwargs_list]) => {
  const times = [];
  let last = null;
  for (const kwargs of kwargs_list) {
    const t = performance.now();
    last = await window.evermind.call(fn, kwargs);
    times.push(performance.now() - t);
  }
  return {times, last};
}"""


def _page_calls(page: Any) -> tuple[Any, Any]:
    """``call(fn, **kwargs)`` and ``timed(fn, kwargs_list)`` (seconds per call) on ``page``."""

    def call(fn: str, **kwargs: Any) -> Any:
        return page.evaluate("([f, k]) => window.evermind.call(f, k)", [fn, kwargs])

    def timed(fn: str, kwargs_list: list[dict[str, Any]]) -> tuple[list[float], Any]:
        r = page.evaluate(PAGE_TIMER, [fn, kwargs_list])
        return [t / 1000 for t in r["times"]], r["last"]

    return call, timed


def run_browser(sizes: list[int], queries: int) -> None:
    from playwright.sync_api import sync_playwright

    from evermind.studio.browser import launch_options
    from evermind.studio.webserver import BundleServer

    sys.path.insert(0, str(ROOT))
    from tests.browser.test_memory_browser import CORPUS, TINY

    subprocess.run([sys.executable, str(ROOT / "build" / "build_web.py")], check=True)
    print(
        "| memories | recall p50 lexical (ms) | p95 | first hybrid recall, embeds all (s) | "
        "recall p50 hybrid, GPU scan (ms) | p95 | scan | cache lookup p50 (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with BundleServer(ROOT / "dist" / "web") as server, sync_playwright() as p:
        browser = p.chromium.launch(**launch_options(p))
        for n in sizes:
            context = browser.new_context()
            page = context.new_page()
            page.goto(server.url + "index.html")
            page.wait_for_function("window.__done === true", timeout=180_000)

            call, timed = _page_calls(page)
            corpus = texts(n, seed=n)
            call(
                "memory_import",
                entries=[{"key": f"m{i}", "content": c} for i, c in enumerate(corpus)],
            )
            probes = [{"query": q, "top_k": 5} for q in texts(queries, seed=n + 1)]
            lexical, _ = timed("memory_recall", probes)
            call("corpus_add", name="notes.md", text=CORPUS)
            call("tokenizer_train", vocab_size=300)
            call("train_start", config=TINY, steps=3, batch_size=2, seq_len=16)
            first, _ = timed("memory_recall", [{"query": "warm up", "top_k": 5}])
            hybrid, last = timed("memory_recall", probes)
            call(
                "cache_import", entries=[{"query": q, "response": "a"} for q in questions(n, n + 2)]
            )
            cache, _ = timed("cache_lookup", [{"query": q} for q in questions(queries, n + 3)])
            print(
                f"| {n:,} | {pct(lexical, 0.5):.1f} | {pct(lexical, 0.95):.1f} | {first[0]:.1f} | "
                f"{pct(hybrid, 0.5):.1f} | {pct(hybrid, 0.95):.1f} | {last['scan']} | "
                f"{pct(cache, 0.5):.1f} |",
                flush=True,
            )
            context.close()
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--model", type=Path, help="also time one query embedding with it")
    parser.add_argument("--browser", action="store_true", help="bench the Studio tab instead")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.browser:
        run_browser(sizes, args.queries)
    else:
        run_native(sizes, args.queries, args.model)
    print(json.dumps({"sizes": sizes, "queries": args.queries}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
