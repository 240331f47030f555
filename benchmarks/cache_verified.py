"""The verified cache over HTTP, the product path: ``evermind serve --upstreams`` on loopback.

For each embedder (``terms``: no model; ``teacher:minilm``; ``package:PATH``, e.g. the one
``make demo`` writes) and each δ (``--deltas``; ``off`` is the rule-based decision), it starts a
loopback OpenAI upstream that answers by *meaning* (a question and its paraphrase get one
answer, a near-miss another: the set's labels) and a gateway (both in processes of their own,
:class:`benchmarks.gateway.Processes`), then replays the set read-through, as the gateway runs:

1. every stored question once (a miss, stored; a few hit an earlier equivalent question);
2. in a seeded shuffle, every paraphrase and every near-miss (a miss is stored too, so
   near-misses end up beside their originals).

Reported per row: **wrong answers** (an answer that is not the asked question's: a near-miss
served anything, or a paraphrase served another entry) as a count and a share of the
lookups of step 2 (the error δ bounds); **paraphrase hits** and **near-miss hits**; the
gateway's **checks** (``/metrics``: checks, mismatches, paid checks and their dollars at the
upstream's gpt-4o-mini price); latency p50/p99 of hits and misses as the client saw them;
and with ``--probes`` the **miss overhead** (unique questions, straight to the upstream vs
through the gateway, alternating; ``benchmarks.gateway.overhead``).

Sets: ``report`` (the corpus split never tuned on; only counts are printed), ``dev`` (the
shared ``cache_pairs_dev.jsonl``, the untouched third check), ``tune`` (development numbers).
It measures; it asserts nothing. Usage::

    python -m benchmarks.cache_verified --set report --embedders terms,teacher:minilm
    python -m benchmarks.cache_verified --set dev \
        --embedders package:dist/demo/evermind-default.evermind
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from evals import cache_corpus, require

from benchmarks.gateway import MODEL, Processes, body, overhead, quantiles, timed

GAUGES = (
    "evermind_gateway_cache_checks_total",
    "evermind_gateway_cache_check_mismatches_total",
    "evermind_gateway_cache_paid_checks_total",
    "evermind_gateway_cache_paid_checks_usd_total",
    "evermind_gateway_cache_learned_threshold",
)


def load_set(name: str, limit: int | None) -> list[dict[str, str]]:
    """The triples of ``name`` (``report``, ``tune`` or ``dev``), at most ``limit``."""
    if name in ("report", "tune"):
        rows = [
            {"id": t.id, "query": t.query, "paraphrase": t.paraphrase, "near_miss": t.near_miss}
            for t in cache_corpus.triples(name)
        ]
    elif name == "dev":
        with require("cache_pairs_dev.jsonl").open(encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
    else:
        raise SystemExit(f"--set: unknown set {name!r}: report, tune or dev")
    return rows[:limit] if limit else rows


def answers_of(rows: Sequence[dict[str, str]]) -> dict[str, str]:
    """Every text's right answer: a question and its paraphrase share one."""
    answers: dict[str, str] = {}
    for row in rows:
        answers[row["query"]] = answers[row["paraphrase"]] = f"Answer {row['id']}."
        answers[row["near_miss"]] = f"Answer {row['id']}, the near-miss."
    return answers


def _gauges(text: str) -> dict[str, float]:
    found = {}
    for name in GAUGES:
        match = re.search(rf"^{name} (\S+)$", text, re.M)
        if match:
            found[name.removeprefix("evermind_gateway_cache_")] = float(match.group(1))
    return found


def replay(
    url: str, client: httpx.Client, rows: Sequence[dict[str, str]], answers: dict[str, str]
) -> dict[str, Any]:
    """Steps 1 and 2 of the module docstring through ``url``; the row's numbers."""
    for row in rows:
        timed(client, url + "/v1/chat/completions", body(row["query"], f"openai/{MODEL}"))
    lookups = [(r["paraphrase"], "paraphrase") for r in rows]
    lookups += [(r["near_miss"], "near_miss") for r in rows]
    random.Random(3).shuffle(lookups)
    wrong = 0
    hits = {"paraphrase": 0, "near_miss": 0}
    hit_s: list[float] = []
    miss_s: list[float] = []
    for text, kind in lookups:
        seconds, response = timed(
            client, url + "/v1/chat/completions", body(text, f"openai/{MODEL}")
        )
        served = response.json()["choices"][0]["message"]["content"]
        hit = response.headers.get("x-evermind-cache", "").startswith("hit")
        (hit_s if hit else miss_s).append(seconds)
        hits[kind] += hit
        wrong += served != answers[text]
    return {
        "lookups": len(lookups),
        "wrong": wrong,
        "error": wrong / len(lookups),
        "paraphrase_hit": hits["paraphrase"] / len(rows),
        "near_miss_hit": hits["near_miss"] / len(rows),
        "hit_latency": quantiles(hit_s),
        "miss_latency": quantiles(miss_s),
        **_gauges(client.get(url + "/metrics").text),
    }


def run(
    set_name: str,
    embedders: Sequence[str],
    deltas: Sequence[str],
    limit: int | None,
    verify_sample: float,
    probes: int,
) -> dict[str, Any]:
    """The benchmark's document: one row per (embedder, δ)."""
    rows = load_set(set_name, limit)
    answers = answers_of(rows)
    out = []
    with tempfile.TemporaryDirectory(prefix="evermind-bench-verified-") as tmp:
        replies = Path(tmp) / "replies.json"
        replies.write_text(json.dumps(answers), encoding="utf-8")
        for embedder in embedders:
            for delta in deltas:
                folder = Path(tmp) / f"{len(out)}"
                folder.mkdir()
                cache = {"max_error": delta if delta == "off" else float(delta)}
                cache["verify_sample"] = verify_sample
                procs = Processes(folder, embedder, True, cache, replies)
                try:
                    with httpx.Client(timeout=120) as client:
                        cost = overhead(procs, client, probes) if probes else None
                        found = replay(procs.url, client, rows, answers)
                finally:
                    procs.stop()
                out.append({"embedder": embedder, "delta": delta, **found, "overhead": cost})
                print(format_row(out[-1]), flush=True)
    return {"bench": "cache_verified", "set": set_name, "triples": len(rows), "rows": out}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_row(row: dict[str, Any]) -> str:
    """One markdown table row (see :data:`HEADER`)."""
    paid_usd = row.get("paid_checks_usd_total")
    overhead_p50 = (row.get("overhead") or {}).get("overhead", {}).get("p50_ms")
    return (
        f"| {row['embedder']} | {row['delta']} | {row['wrong']} / {row['lookups']} "
        f"({row['error']:.3f}) | {row['paraphrase_hit']:.3f} | {row['near_miss_hit']:.3f} | "
        f"{row.get('checks_total', 0):.0f} / {row.get('check_mismatches_total', 0):.0f} | "
        f"{row.get('paid_checks_total', 0):.0f} (${paid_usd or 0:.4f}) | "
        f"{_ms(row['hit_latency']['p50_ms'])} / {_ms(row['hit_latency']['p99_ms'])} | "
        f"{_ms(row['miss_latency']['p50_ms'])} / {_ms(row['miss_latency']['p99_ms'])} | "
        f"{_ms(overhead_p50)} |"
    )


HEADER = (
    "| embedder | δ | wrong / lookups (rate) | paraphrase hit | near-miss hit | checks / "
    "mismatches | paid checks ($) | hit ms p50 / p99 | miss ms p50 / p99 | miss overhead ms p50 |"
    "\n|---|---|---|---|---|---|---|---|---|---|"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default="report", choices=("report", "tune", "dev"))
    parser.add_argument("--embedders", default="terms", help="comma-separated")
    parser.add_argument("--deltas", default="0.01,0.05", help="comma-separated; 'off' = rules")
    parser.add_argument("--limit", type=int, default=None, help="first N triples of the set")
    parser.add_argument("--verify-sample", type=float, default=0.05)
    parser.add_argument("--probes", type=int, default=0, help="miss-overhead probes per row")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    print(f"set {args.set}" + ("" if args.set == "report" else " (development numbers)"))
    print(HEADER, flush=True)
    doc = run(
        args.set,
        [e.strip() for e in args.embedders.split(",") if e.strip()],
        [d.strip() for d in args.deltas.split(",") if d.strip()],
        args.limit,
        args.verify_sample,
        args.probes,
    )
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
