"""The verified cache in process, the library path: ``SemanticCache`` replayed read-through.

The same store/probe sequence as the gateway's replay (:mod:`benchmarks.cache_verified`: every
stored question once, then every paraphrase and near-miss in the same seeded shuffle, a miss
stored too), through one in-process :class:`evermind.cache.SemanticCache` per (embedder, δ),
with a ``generate`` that answers by meaning (:func:`benchmarks.cache_verified.answers_of`, the
loopback upstream's answers: a question and its paraphrase get one answer, a near-miss another),
so both paths are judged the same way. Paths (``--paths``):

- ``generate``: :meth:`SemanticCache.get_or_generate` with the cache's default
  :class:`~evermind.cache.verified.Verification` (checked until bounded, as the gateway);
- ``lookup``: :meth:`SemanticCache.lookup`, and on a miss ``generate`` then ``store`` (a caller
  that never hands the cache its ``generate``: no verification signal; the cache's own
  verification, never checked, so every would-be hit meets the no-signal fallback);
- ``shipped``: the same with the shipped bound (what a lookup without a signal served before
  the fallback: a ``Verification`` passed in that never checks, so lookups are not guarded).

Reported per row: **wrong answers** over the lookups of step 2 (the error δ bounds),
**paraphrase hits** (and the unchecked ones: served without calling ``generate``), **near-miss
hits**, and on the ``generate`` path the **checks** (all, mismatches, forced by
``must_check``). Sets as in :mod:`benchmarks.cache_verified` (``report``: counts only).
It measures; it asserts nothing. Usage::

    EVERMIND_EVAL_DIR=../shared/eval python -m benchmarks.cache_library --set dev \
        --embedders terms,teacher:minilm --deltas 0.01,0.05 --paths generate,lookup
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.cache_verified import answers_of, load_set
from evermind.cache.semantic import SemanticCache
from evermind.cache.verified import Verification
from evermind.search.matrix import MatrixIndex


def vectors_of(embedder_name: str, texts: Sequence[str]) -> Callable[[str], list[float]]:
    """``embed(text)`` over vectors computed once for ``texts`` (MiniLM in batches)."""
    from evals.cache_verifier import embedder, unit_vectors

    name = {"teacher:minilm": "minilm"}.get(embedder_name, embedder_name)
    vectors = unit_vectors(embedder(name), list(dict.fromkeys(texts)))
    return lambda text: vectors[text].tolist()


def replay(
    rows: Sequence[dict[str, str]],
    embed: Callable[[str], list[float]],
    fingerprint: str,
    delta: float,
    path: str,
) -> dict[str, Any]:
    """One cache, steps 1 and 2 of the module docstring through ``path``; the row's numbers."""
    answers = answers_of(rows)
    calls: list[str] = []

    def generate(text: str) -> str:
        calls.append(text)
        return answers[text]

    options: dict[str, Any] = {}  # lookup: the cache's own verification (guarded)
    if path == "generate":
        options["verification"] = Verification(delta, seed=0)
    elif path == "shipped":  # never checks, never guards: lookups serve the shipped bound
        options["verification"] = Verification(delta, sample_rate=0.0, until_bounded=False)
    cache = SemanticCache(
        embed,
        fingerprint=fingerprint,
        capacity=100_000,
        index=MatrixIndex(),
        max_error=delta,
        **options,
    )

    def ask(text: str) -> tuple[object, bool, bool]:
        """The answer served, whether it came from the cache, and unchecked."""
        if path == "generate":
            got = cache.get_or_generate(text, generate)
            return got.response, got.lookup.hit, got.lookup.hit and not got.generated
        found = cache.lookup(text)
        if found.hit:
            return found.response, True, True
        response = generate(text)
        cache.store(text, response)
        return response, False, False

    for row in rows:
        ask(row["query"])
    lookups = [(r["paraphrase"], "paraphrase") for r in rows]
    lookups += [(r["near_miss"], "near_miss") for r in rows]
    random.Random(3).shuffle(lookups)  # the gateway replay's order
    wrong = 0
    hits = {"paraphrase": 0, "near_miss": 0}
    unchecked = {"paraphrase": 0, "near_miss": 0}
    before = len(calls)
    for text, kind in lookups:
        served, hit, free = ask(text)
        hits[kind] += hit
        unchecked[kind] += free
        wrong += served != answers[text]
    checks = cache.verification
    return {
        "lookups": len(lookups),
        "wrong": wrong,
        "error": wrong / len(lookups),
        "paraphrase_hit": hits["paraphrase"] / len(rows),
        "paraphrase_hit_unchecked": unchecked["paraphrase"] / len(rows),
        "near_miss_hit": hits["near_miss"] / len(rows),
        "generate_calls": len(calls) - before,
        "checks": 0 if checks is None else checks.checked,
        "mismatches": 0 if checks is None else checks.mismatches,
        "forced": 0 if checks is None else checks.forced,
        "paid": 0 if checks is None else checks.paid,
        "served_bound": None if checks is None else checks.served_bound(),
    }


HEADER = (
    "| embedder | δ | path | wrong / lookups (rate) | paraphrase hit (unchecked) | "
    "near-miss hit | checks / mismatches | paid (forced) |\n|---|---|---|---|---|---|---|---|"
)


def format_row(row: dict[str, Any]) -> str:
    """One markdown table row (see :data:`HEADER`)."""
    return (
        f"| {row['embedder']} | {row['delta']:g} | {row['path']} | {row['wrong']} / "
        f"{row['lookups']} ({row['error']:.4f}) | {row['paraphrase_hit']:.3f} "
        f"({row['paraphrase_hit_unchecked']:.3f}) | {row['near_miss_hit']:.3f} | "
        f"{row['checks']} / {row['mismatches']} | {row['paid']} ({row['forced']}) |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default="report", choices=("report", "tune", "dev"))
    parser.add_argument("--embedders", default="terms", help="comma-separated")
    parser.add_argument("--deltas", default="0.01,0.05", help="comma-separated")
    parser.add_argument("--paths", default="generate,lookup,shipped", help="comma-separated")
    parser.add_argument("--limit", type=int, default=None, help="first N triples of the set")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = load_set(args.set, args.limit)
    texts = [r[k] for r in rows for k in ("query", "paraphrase", "near_miss")]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if any(p not in ("generate", "lookup", "shipped") for p in paths):
        raise SystemExit(f"--paths: generate, lookup or shipped, got {args.paths!r}")
    print(f"set {args.set}, {len(rows)} triples" + ("" if args.set == "report" else " (dev)"))
    print(HEADER, flush=True)
    out = []
    for name in (e.strip() for e in args.embedders.split(",") if e.strip()):
        embed = vectors_of(name, texts)
        for delta in (float(d) for d in args.deltas.split(",") if d.strip()):
            for path in paths:
                found = replay(rows, embed, f"bench-{name}", delta, path)
                out.append({"embedder": name, "delta": delta, "path": path, **found})
                print(format_row(out[-1]), flush=True)
    if args.json:
        doc = {"bench": "cache_library", "set": args.set, "triples": len(rows), "rows": out}
        args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
