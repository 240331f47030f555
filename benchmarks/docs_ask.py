#!/usr/bin/env python3
"""``evermind ask`` over 10⁴ ingested table rows: p50 latency, with and without ``--where``.

A synthetic tickets CSV of ``--rows`` rows (default 10,000; each a distinct ticket built from
the ``evals/docs_filters`` topics: subject and body with a ticket number and a random detail,
typed fields ``status``, ``priority``, ``area``, ``seats``, ``created``) goes through
``evermind ingest`` into a SQLite memory file (one chunk per row). Then, per question of a
fixed list, each timed separately:

- **warm**: :func:`evermind.ingest.search_ingested` on a store already open and loaded (what
  ``evermind mcp`` ``docs_search`` and ``POST /v1/retrieve`` pay per call), unfiltered and
  with a filter (``status = "open" and priority in ("P1", "P2")``, about 27% of the rows; and
  a selective one, ``area = "api" and seats >= 500 and created >= 20260901``, under 1%);
- **cold CLI**: the ``evermind ask`` command as a user runs it, one process per question
  (interpreter start, imports, loading the store's 10⁴ records and its BM25 index, ranking).

It reports medians (p50) and p90s in milliseconds and asserts nothing about time (the
machine is shared; absolute times vary). Usage::

    PYTHONPATH=src .venv/bin/python -m benchmarks.docs_ask
    PYTHONPATH=src .venv/bin/python -m benchmarks.docs_ask --rows 2000 --cli-runs 3 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evermind import ingest
from evermind.ingest import ParseOptions, search_ingested
from evermind.memory import MemoryStore
from evermind.vectorstore.where import parse_where

ROOT = Path(__file__).resolve().parents[1]
SEED_TICKETS = ROOT / "evals" / "docs_filters" / "tickets.csv"
BROAD = 'status = "open" and priority in ("P1", "P2")'
NARROW = 'area = "api" and seats >= 500 and created >= 20260901'
QUESTIONS = [
    "webhook signature does not match the HMAC",
    "invoice charged twice need refund",
    "SAML single sign-on invalid audience",
    "password reset email never arrives",
    "CSV export garbles accented names",
    "search returns deleted documents",
    "iOS app crashes on launch",
    "API rate limit 429 during nightly sync",
    "cursor pagination skips records",
    "Android push notifications missing",
]
DETAILS = [
    "It started after the weekend.",
    "Our operations team escalated it.",
    "Only one region is affected.",
    "We can reproduce it every time.",
    "The audit log shows nothing unusual.",
    "It affects our biggest customer.",
]


def write_tickets(path: Path, rows: int, seed: int = 7) -> None:
    """``rows`` distinct tickets from the eval's topics, with typed fields."""
    rng = random.Random(seed)
    with open(SEED_TICKETS, newline="", encoding="utf-8") as handle:
        topics = {
            (r["subject"].split(" (")[0], r["body"].split(". ")[0], r["area"])
            for r in csv.DictReader(handle)
        }
    pool = sorted(topics)
    header = ["id", "created", "status", "priority", "area", "seats", "subject", "body"]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for n in range(rows):
            subject, body, area = rng.choice(pool)
            writer.writerow(
                [
                    f"TK-{n}",
                    20260000 + rng.randint(1, 12) * 100 + rng.randint(1, 28),
                    rng.choice(["open", "closed", "closed", "pending"]),
                    rng.choice(["P1", "P2", "P3", "P4"]),
                    area,
                    rng.choice([5, 12, 40, 120, 500, 2000]),
                    f"{subject} #{n}",
                    f"{body}. {rng.choice(DETAILS)} Ticket {n} from account {rng.randint(1, 900)}.",
                ]
            )


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p90_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2),
        "runs": len(ordered),
    }


async def warm(db: Path, repeats: int) -> dict[str, Any]:
    """In-process search on one open store: unfiltered, broad filter, narrow filter."""
    out: dict[str, Any] = {}
    async with MemoryStore(db, namespace="default/default") as store:
        started = time.perf_counter()
        await store.refresh()
        out["load_s"] = round(time.perf_counter() - started, 3)
        out["chunks"] = await store.count()
        for label, where in (
            ("unfiltered", None),
            ("broad filter", BROAD),
            ("narrow filter", NARROW),
        ):
            parsed = None if where is None else parse_where(where)
            times = []
            found = []
            for _ in range(repeats):
                for question in QUESTIONS:
                    started = time.perf_counter()
                    passages = await search_ingested(store, question, 5, parsed)
                    times.append(time.perf_counter() - started)
                    found.append(len(passages))
            out[label] = {**summary(times), "mean_passages": round(sum(found) / len(found), 2)}
    return out


def cold_cli(db: Path, runs: int, where: str | None) -> dict[str, Any]:
    """``evermind ask`` as a process per question (p50 of ``runs`` questions)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    times = []
    for question in QUESTIONS[:runs]:
        command = [sys.executable, "-m", "evermind.cli", "ask", question, "--store", str(db)]
        if where is not None:
            command += ["--where", where]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
        times.append(time.perf_counter() - started)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"evermind ask failed: {done.stderr.strip()}")
    return summary(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.docs_ask", description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3, help="warm passes over the questions")
    parser.add_argument("--cli-runs", type=int, default=5, help="cold evermind ask processes")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"rows": args.rows, "broad": BROAD, "narrow": NARROW}
    with tempfile.TemporaryDirectory() as folder:
        csv_path = Path(folder) / "tickets.csv"
        db = Path(folder) / "memory.db"
        write_tickets(csv_path, args.rows)

        async def load() -> float:
            started = time.perf_counter()
            async with MemoryStore(db, namespace="default/default") as store:
                await ingest.sync(
                    store,
                    [csv_path],
                    base=folder,
                    options=ParseOptions(columns=("subject", "body")),
                )
            return time.perf_counter() - started

        report["ingest_s"] = round(asyncio.run(load()), 2)
        report["warm"] = asyncio.run(warm(db, args.repeats))
        report["cold_cli"] = {
            "unfiltered": cold_cli(db, args.cli_runs, None),
            "broad filter": cold_cli(db, args.cli_runs, BROAD),
        }
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
