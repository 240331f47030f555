#!/usr/bin/env python3
"""Quality tables for issue 7: memory recall and semantic cache, lexical vs Evermind vs hybrid.

Runs the development sets in ``--eval-dir``, else ``$EVERMIND_EVAL_DIR``, else ``shared/eval``
next to the checkout (see their README; these are development numbers, the held-out set
decides the real ones):

- memory (``memory_recall_dev.jsonl``, through ``MemoryStore.recall`` over all 155 facts):
  recall@1, recall@5, MRR, trap@1 for *lexical only* (BM25, no embedder), *Evermind only*
  (the model's cosine, lexical off) and *hybrid* (BM25 + cosine, RRF), each with the store's
  default steps (MMR, importance, recency) and hybrid also without MMR;
- cache (``cache_pairs_dev.jsonl``, through the shared evaluator ``eval_dev.py``): ROC AUC,
  paraphrase hit rate and near-miss false-hit rate with ``evermind.cache.default_guard`` for
  *lexical* (the tab's fallback: hashed character trigrams), *Evermind* (the model's
  embeddings) and *hybrid* (both vectors concatenated with equal weight: cosine = the mean of
  the two cosines; what the Studio's cache uses with a model), at the threshold where cosine
  alone serves 90% of paraphrases (the evaluator's calibration) and at the Studio's defaults.

The Evermind embedder is a ``.evermind`` package loaded with ``evermind.load`` (numpy CPU
model; the tab's GPU model computes the same embeddings)::

    .venv/bin/evermind train --device gpu --steps 300 --out /tmp/default.evermind
    .venv/bin/python -m evals.quality --model /tmp/default.evermind --json quality.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m evals.quality``
    sys.path.insert(0, str(ROOT))
try:
    import evermind
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

import evermind  # noqa: E402
from evals import memory as eval_memory  # noqa: E402
from evals import require  # noqa: E402
from evermind.cache import default_guard  # noqa: E402
from evermind.memory import RecallOptions  # noqa: E402
from evermind.studio.tab_memory import (  # noqa: E402
    HYBRID_THRESHOLD,
    LEXICAL_THRESHOLD,
    trigram_vector,
)


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"eval_quality: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Lexical:
    """The tab cache's lexical fallback as a batch embedder."""

    fingerprint = "trigram-256"

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.array([trigram_vector(t) for t in texts], dtype=np.float32)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)


class Evermind:
    """A loaded model as a batch embedder (unit vectors), counting the texts it embeds."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.fingerprint = f"evermind-eval-{id(model)}"
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        vectors = np.asarray(self.model.embed(texts), dtype=np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)


class Hybrid:
    """Lexical and Evermind vectors side by side, each scaled by 1/sqrt(2)."""

    def __init__(self, semantic: Evermind) -> None:
        self.semantic, self.lexical = semantic, Lexical()

    def __call__(self, texts: list[str]) -> np.ndarray:
        scale = 1 / math.sqrt(2)
        return np.hstack([self.lexical(texts) * scale, self.semantic(texts) * scale])


def memory_tables(eval_memory: ModuleType, data: Path, embedder: Evermind) -> dict[str, Any]:
    facts, questions = eval_memory.load(data)
    runs: list[tuple[str, Any, RecallOptions]] = [
        ("lexical only (BM25)", None, RecallOptions()),
        ("Evermind embedder only", embedder, RecallOptions(lexical=False)),
        ("hybrid (BM25 + Evermind, RRF)", embedder, RecallOptions()),
        ("hybrid, no MMR", embedder, RecallOptions(mmr=False)),
    ]
    out: dict[str, Any] = {}
    print(f"## Memory recall ({len(facts)} facts, {len(questions)} questions, dev set)\n")
    print("| ranker | questions | n | recall@1 | recall@5 | MRR | trap@1 |")
    print("|---|---|---|---|---|---|---|")
    for name, emb, options in runs:
        table, per_query = asyncio.run(eval_memory.evaluate(facts, questions, emb, options))
        eval_memory.print_table(name, table)
        out[name] = {"table": table, "ms_per_query": per_query * 1000}
    print()
    return out


def cache_tables(eval_dev: ModuleType, data: Path, embedder: Evermind) -> list[dict[str, Any]]:
    rows = eval_dev.load_jsonl(data)
    guard = default_guard
    runs: list[tuple[str, Any, float | None]] = [
        ("lexical (char trigrams)", Lexical(), None),
        ("Evermind", embedder, None),
        ("hybrid (trigrams + Evermind)", Hybrid(embedder), None),
        ("lexical (char trigrams)", Lexical(), LEXICAL_THRESHOLD),
        ("hybrid (trigrams + Evermind)", Hybrid(embedder), HYBRID_THRESHOLD),
    ]
    results = []
    print(f"## Semantic cache ({len(rows)} triples, dev set, guard: default_guard)\n")
    print(
        "| embedder | threshold | ROC AUC | cos(q,p) > cos(q,n) | paraphrase hit | "
        "near-miss false hit | cache-wide paraphrase->own | cache-wide near-miss served |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, emb, threshold in runs:
        r = eval_dev.evaluate_cache(rows, emb, guard, threshold, 0.9, 64)
        source = "Studio default" if threshold is not None else "calibrated: cosine serves 90%"
        print(
            f"| {name} | {r['threshold']:.3f} ({source}) | {r['auc']:.3f} | "
            f"{r['paired_win']:.3f} | {r['paraphrase_hit_rate']:.3f} | "
            f"{r['near_miss_false_hit_rate']:.3f} | {r['wide_paraphrase_correct_hit']:.3f} | "
            f"{r['wide_near_miss_false_hit']:.3f} |"
        )
        results.append({"embedder": name, "threshold_source": source, **r})
    print()
    return results


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a .evermind package")
    parser.add_argument(
        "--eval-dir",
        type=Path,
        help="the folder of the development sets (default: $EVERMIND_EVAL_DIR, else "
        "shared/eval next to the checkout)",
    )
    parser.add_argument("--only", choices=("cache", "memory"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    eval_dir = require("eval_dev.py", args.eval_dir).parent
    started = time.perf_counter()
    model = evermind.load(args.model)
    embedder = Evermind(model)
    print(f"model: {args.model} ({getattr(model, 'ref', '?')})\n")
    report: dict[str, Any] = {"model": str(args.model)}
    if args.only in (None, "memory"):
        report["memory"] = memory_tables(eval_memory, eval_dir / eval_memory.DATA_NAME, embedder)
    if args.only in (None, "cache"):
        eval_dev = _module(eval_dir / "eval_dev.py", "eval_dev")
        report["cache"] = cache_tables(eval_dev, eval_dir / "cache_pairs_dev.jsonl", embedder)
    seconds = time.perf_counter() - started
    print(f"(development numbers; {seconds:.0f} s, {embedder.texts} texts embedded)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=float) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
