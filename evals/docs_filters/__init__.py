"""Filtered questions over a tickets CSV: recall@5 of the right rows, and every row admitted.

``tickets.csv`` (200 support tickets: ``id``, ``created`` as a ``YYYYMMDD`` number,
``status``, ``priority``, ``area``, ``customer``, ``seats``, ``escalated`` true/false,
``sla_hours`` (empty for closed tickets), ``subject``, ``body``) is ingested by
:func:`evermind.ingest.sync` (text columns ``subject,body``, as ``evermind ingest --columns``
does) into a fresh SQLite memory store. ``questions.jsonl`` holds 31 questions, each a
paraphrase of one ticket topic (17 topics, each on 6 to 20 tickets) with a ``--where``
filter, and the ids of the tickets that are on that topic and pass the filter (labelled
from the generator's topic of each row, not from what the system returns). Each question
goes through :func:`evermind.ingest.search_ingested` with the filter parsed by
:func:`evermind.vectorstore.where.parse_where`, ``top_k=5``.

Reported:

- ``recall@5``: per question, the expected rows among the 5 passages over
  ``min(5, expected)``; mean over questions, and how many questions reach 1.0;
- ``violations``: passages whose cited row (read back from the CSV by the citation's line,
  not from the passage's own metadata) the filter does not admit; must be 0;
- ``unfiltered recall@5``: the same questions without their filters (how much the filter
  is needed to reach the right rows).

Run::

    PYTHONPATH=src .venv/bin/python -m evals.docs_filters                    # lexical recall
    PYTHONPATH=src .venv/bin/python -m evals.docs_filters --embedder terms   # + hashed terms
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from evermind import ingest
from evermind.ingest import ParseOptions, search_ingested
from evermind.ingest.tabular import typed_cell
from evermind.memory import MemoryStore
from evermind.vectorstore.filters import Filter, evaluate
from evermind.vectorstore.where import parse_where

HERE = Path(__file__).resolve().parent
TICKETS = HERE / "tickets.csv"
QUESTIONS = HERE / "questions.jsonl"
TOP_K = 5


def rows_by_line(path: Path) -> dict[int, dict[str, Any]]:
    """The CSV's rows by the line each starts on (header on line 1), cells typed."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        out: dict[int, dict[str, Any]] = {}
        start = reader.line_num + 1
        for row in reader:
            cells = {name: typed_cell(cell) for name, cell in zip(header, row, strict=True)}
            out[start] = {name: value for name, value in cells.items() if value is not None}
            start = reader.line_num + 1
    return out


def recall_at_k(returned: list[str], expected: list[str]) -> float:
    if not expected:
        return 1.0 if not returned else 0.0
    return len(set(returned[:TOP_K]) & set(expected)) / min(TOP_K, len(expected))


async def run(embedder_name: str, min_coverage: float | None = None) -> dict[str, Any]:
    """Ingests the tickets and asks every question; the report as a dict."""
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    rows = rows_by_line(TICKETS)
    embedder = None
    if embedder_name == "terms":
        from evermind.cli.ingest import TermsEmbedder

        embedder = TermsEmbedder()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "memory.db"
        async with MemoryStore(db, embedder, namespace="default/default") as store:
            options = ParseOptions(columns=("subject", "body"))
            await ingest.sync(store, [TICKETS], base=HERE, options=options)
            per_question = []
            violations = 0
            latencies = []
            for item in questions:
                where: Filter = parse_where(item["where"])
                started = time.perf_counter()
                passages = await search_ingested(
                    store, item["question"], TOP_K, where, min_coverage=min_coverage
                )
                latencies.append(time.perf_counter() - started)
                plain = await search_ingested(store, item["question"], TOP_K)
                returned = [str(rows[p.line]["id"]) for p in passages]
                bad = [p.citation for p in passages if not evaluate(where, rows[p.line])]
                violations += len(bad)
                per_question.append(
                    {
                        "question": item["question"],
                        "where": item["where"],
                        "expected": item["expected"],
                        "returned": returned,
                        "recall@5": recall_at_k(returned, item["expected"]),
                        "unfiltered recall@5": recall_at_k(
                            [str(rows[p.line]["id"]) for p in plain], item["expected"]
                        ),
                        "violations": bad,
                    }
                )
    n = len(per_question)
    latencies.sort()
    return {
        "embedder": embedder_name,
        "min_coverage": min_coverage,
        "questions": n,
        "rows": len(rows),
        "recall@5": round(sum(q["recall@5"] for q in per_question) / n, 3),
        "questions at recall 1.0": sum(1 for q in per_question if q["recall@5"] == 1.0),
        "unfiltered recall@5": round(sum(q["unfiltered recall@5"] for q in per_question) / n, 3),
        "violations": violations,
        "filtered search p50 ms": round(1000 * latencies[n // 2], 2),
        "per_question": per_question,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.docs_filters", description=__doc__)
    parser.add_argument("--embedder", choices=["none", "terms"], default="none")
    parser.add_argument(
        "--min-coverage", type=float, default=None, help="as evermind ask --min-coverage"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the full report here")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args.embedder, args.min_coverage))
    summary = {k: v for k, v in report.items() if k != "per_question"}
    print(json.dumps(summary, indent=2))
    for item in report["per_question"]:
        if item["recall@5"] < 1.0 or item["violations"]:
            print(
                f"  recall@5 {item['recall@5']:.2f}  {item['question']!r} where "
                f"{item['where']}: expected {item['expected']}, got {item['returned']}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if report["violations"] else 0
