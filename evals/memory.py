#!/usr/bin/env python3
"""Runs the memory-recall development set through ``MemoryStore.recall``.

Loads every fact of ``memory_recall_dev.jsonl`` into a ``MemoryStore`` on a temporary SQLite
file, asks every question through ``recall`` (ranking all facts), and prints recall@1,
recall@5, MRR and trap@1 per question kind with the definitions of the set's README:

- recall@k = |gold ∩ top k| / min(k, |gold|); MRR = 1 / rank of the first gold fact;
- ties are broken against the gold facts (a gold hit tied in score with the non-gold hits
  right after it is counted after them); facts recall does not return rank last;
- trap@1 = share of questions with distractor_keys whose top fact is a distractor.

Runs lexical-only (no embedder) always and, for every ``--embedder`` given, the embedder alone
(``RecallOptions(lexical=False)``) and hybrid (BM25 + embedder fused). An embedder is ``minilm``
(the teacher), ``collapsed`` (constant vector plus noise), ``package:PATH`` or a path ending in
``.evermind``, or ``module:function`` (``function(texts) -> vectors``; a module part ending in
``.py`` is loaded from that file); see :mod:`evals.embedders`. Besides the per-kind rows every
run reports the even and odd question ids apart (``ids:even``, ``ids:odd``): choosing a
ranking rule by the mean of the two halves and reporting both shows how much of a gain is
fitted to one half. This is a development set: the numbers are development numbers.

The set is found in ``$EVERMIND_EVAL_DIR``, else ``shared/eval`` next to the checkout (or
pass ``--data``).

Usage:
    .venv/bin/python -m evals.memory
    .venv/bin/python -m evals.memory --embedder minilm --embedder package:demo.evermind
    .venv/bin/python -m evals.memory --embedder my_embed.py:embed_texts --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m evals.memory``
    sys.path.insert(0, str(ROOT))
try:
    import evermind  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(ROOT / "src"))

from evals import require  # noqa: E402
from evals.embedders import resolve  # noqa: E402
from evermind.memory import Hit, MemoryStore, RecallOptions  # noqa: E402

#: The development set's file name (in the folder :func:`evals.find` looks in).
DATA_NAME = "memory_recall_dev.jsonl"

#: The BM25 baseline row of the set's README (eval_dev.py, word tokens, k1 1.2, b 0.75).
README_BM25 = {"r@1": 0.551, "r@5": 0.724, "mrr": 0.638, "trap@1": 0.065}


def load(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Returns (facts, questions) from the JSONL file."""
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    facts = [r for r in rows if r.get("type") == "fact"]
    questions = [r for r in rows if r.get("type") == "question"]
    return facts, questions


def split(question: dict[str, Any]) -> str:
    """``ids:even`` or ``ids:odd`` by the digits of the question's id (``ids:none`` without)."""
    digits = "".join(c for c in str(question.get("id", "")) if c.isdigit())
    return f"ids:{'odd' if int(digits) % 2 else 'even'}" if digits else "ids:none"


def gold_rank(hits: Sequence[Hit], gold: set[str], n_facts: int) -> list[int]:
    """0-based ranks of the gold facts, ties broken against gold; missing ones rank last."""
    ranks = []
    keys = [h.key for h in hits]
    for key in gold:
        if key not in keys:
            ranks.append(n_facts - 1)
            continue
        i = keys.index(key)
        j = i
        while j + 1 < len(hits) and hits[j + 1].score == hits[i].score:
            j += 1  # a run of equal scores after the gold hit: count the gold hit last
        ranks.append(j)
    return sorted(ranks)


async def evaluate(
    facts: list[dict[str, Any]],
    questions: list[dict[str, Any]],
    embedder: Any,
    options: RecallOptions,
) -> tuple[dict[str, dict[str, float]], float]:
    """Loads the facts, asks every question, returns (metrics per kind, seconds per query)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "eval.db", embedder, options=options)
        try:
            for fact in facts:
                await store.remember(fact["key"], fact["content"], tags=fact.get("tags", ()))
            await store.recall("warm-up", top_k=1)  # embeds every fact once
            stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
            started = time.perf_counter()
            for question in questions:
                hits = await store.recall(question["question"], top_k=len(facts))
                gold = set(question["gold_keys"])
                ranks = gold_rank(hits, gold, len(facts))
                top = hits[0].key if hits else None
                for bucket in ("all", question.get("kind", "unlabelled"), split(question)):
                    s = stats[bucket]
                    for k in (1, 5):
                        s[f"r@{k}"].append(sum(r < k for r in ranks) / min(k, len(gold)))
                    s["mrr"].append(1.0 / (1 + ranks[0]))
                    if question.get("distractor_keys"):
                        s["trap@1"].append(float(top in question["distractor_keys"]))
            per_query = (time.perf_counter() - started) / max(len(questions), 1)
        finally:
            await store.close()
    table = {
        kind: {"n": float(len(s["mrr"])), **{m: sum(v) / len(v) for m, v in s.items() if v}}
        for kind, s in stats.items()
    }
    return table, per_query


def print_table(name: str, table: dict[str, dict[str, float]]) -> None:
    """Prints one ranker's rows in the README's table layout."""
    for kind in ["all", *sorted(k for k in table if k != "all")]:
        s = table[kind]
        trap = f"{s['trap@1']:.3f}" if "trap@1" in s else "-"
        print(
            f"| {name} | {kind} | {int(s['n'])} | {s['r@1']:.3f} | {s['r@5']:.3f} "
            f"| {s['mrr']:.3f} | {trap} |"
        )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        help=f"the set (default: {DATA_NAME} in $EVERMIND_EVAL_DIR, else shared/eval next to "
        "the checkout)",
    )
    parser.add_argument(
        "--embedder",
        action="append",
        default=[],
        help="minilm, collapsed, package:PATH or module:function (texts -> vectors); adds the "
        "embedder alone and hybrid; repeatable",
    )
    parser.add_argument("--no-mmr", action="store_true", help="switch the MMR step off")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    facts, questions = load(args.data if args.data is not None else require(DATA_NAME))
    hybrid = RecallOptions(mmr=not args.no_mmr)
    alone = RecallOptions(mmr=not args.no_mmr, lexical=False)
    runs: list[tuple[str, Any, RecallOptions]] = [("lexical", None, hybrid)]
    for spec in args.embedder:
        name, embedder = resolve(spec)
        runs.append((f"{name} alone", embedder, alone))
        runs.append((f"{name} hybrid", embedder, hybrid))
    print(f"## Memory recall via MemoryStore ({len(facts)} facts, {len(questions)} questions)\n")
    print("| ranker | questions | n | recall@1 | recall@5 | MRR | trap@1 |")
    print("|---|---|---|---|---|---|---|")
    b = README_BM25
    print(
        f"| README bm25 baseline | all | {len(questions)} | {b['r@1']:.3f} | {b['r@5']:.3f} "
        f"| {b['mrr']:.3f} | {b['trap@1']:.3f} |"
    )
    report: dict[str, Any] = {}
    timings = []
    for name, embedder, options in runs:
        table, per_query = asyncio.run(evaluate(facts, questions, embedder, options))
        print_table(name, table)
        report[name] = table
        timings.append(f"{name}: {per_query * 1000:.2f} ms/query")
    print("\n## recall@1 by question-id half (development numbers)\n")
    print("| ranker | all | even ids | odd ids | mean of halves |")
    print("|---|---|---|---|---|")
    for name, table in report.items():
        even, odd = table["ids:even"]["r@1"], table["ids:odd"]["r@1"]
        print(
            f"| {name} | {table['all']['r@1']:.3f} | {even:.3f} | {odd:.3f} "
            f"| {(even + odd) / 2:.3f} |"
        )
    print("\n" + "; ".join(timings) + f"; options: mmr={'off' if args.no_mmr else 'on'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
