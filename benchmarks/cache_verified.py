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

With ``--decision-rounds N`` it first measures, in process, what the verified decision
itself costs per lookup (:func:`decision_cost`): the set's questions stored, each paraphrase
and near-miss decided among its top four candidates by
:func:`evermind.cache.verified.decide_verified`, once on the reference path
(:meth:`~evermind.cache.verifier.PairVerifier.probability_ref`: the features recomputed from
both texts on every call, what every lookup ran before) and once on the fast path (per-text
work cached), alternating which goes first over ``N`` rounds; each round starts from cold
caches with only the stored questions seen, so every lookup tokenises a new question;
it prints both medians, their ratio, and how many decisions differ (the fast path must give
the same ones). With ``--miss-path N`` it measures the cache's whole miss path in process
(:func:`miss_path`: ``alookup`` + ``astore`` of unique probes in a cache of the set's
questions, built as the gateway builds it), verified against the rules, over ``N`` rounds.

Sets: ``report`` (the corpus split never tuned on; only counts are printed), ``dev`` (the
shared ``cache_pairs_dev.jsonl``, the untouched third check), ``tune`` (development numbers).
It measures; it asserts nothing. Usage::

    python -m benchmarks.cache_verified --set report --embedders terms,teacher:minilm
    python -m benchmarks.cache_verified --set dev \
        --embedders package:dist/demo/evermind-default.evermind
    python -m benchmarks.cache_verified --set tune --embedders terms,teacher:minilm \
        --deltas 0.01 --decision-rounds 7 --decision-only
    python -m benchmarks.cache_verified --set tune --limit 300 --deltas 0.01 --miss-path 5 \
        --decision-only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from evals import cache_corpus, require

from benchmarks.gateway import MODEL, Processes, body, overhead, quantiles, timed
from evermind.cache.decide import Candidate, Decision
from evermind.cache.features import clear_caches, text_profile
from evermind.cache.verified import decide_verified
from evermind.cache.verifier import PairVerifier, default_verifier
from evermind.search.calibration import Calibration, measure_calibration
from evermind.text import tokenize

GAUGES = (
    "evermind_gateway_cache_checks_total",
    "evermind_gateway_cache_check_mismatches_total",
    "evermind_gateway_cache_paid_checks_total",
    "evermind_gateway_cache_paid_checks_usd_total",
    "evermind_gateway_cache_learned_threshold",
    "evermind_gateway_cache_forced_checks_total",
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
    checked = {"paraphrase": 0, "near_miss": 0}
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
        # A hit served after the gateway checked it against the upstream saved nothing.
        detail = str((response.json().get("evermind") or {}).get("detail", ""))
        checked[kind] += hit and "checked against the upstream" in detail
        wrong += served != answers[text]
    return {
        "lookups": len(lookups),
        "wrong": wrong,
        "error": wrong / len(lookups),
        "paraphrase_hit": hits["paraphrase"] / len(rows),
        "near_miss_hit": hits["near_miss"] / len(rows),
        "paraphrase_hit_unchecked": (hits["paraphrase"] - checked["paraphrase"]) / len(rows),
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
    until_bounded: bool = True,
) -> dict[str, Any]:
    """The benchmark's document: one row per (embedder, δ)."""
    rows = load_set(set_name, limit)
    answers = answers_of(rows)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="evermind-bench-verified-") as tmp:
        replies = Path(tmp) / "replies.json"
        replies.write_text(json.dumps(answers), encoding="utf-8")
        for embedder in embedders:
            for delta in deltas:
                folder = Path(tmp) / f"{len(out)}"
                folder.mkdir()
                cache = {"max_error": delta if delta == "off" else float(delta)}
                cache["verify_sample"] = verify_sample
                cache["verify_until_bounded"] = until_bounded
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


class ReferenceVerifier(PairVerifier):
    """The shipped weights on the reference path: every probability from
    :meth:`PairVerifier.probability_ref` (what the decision ran before the fast path)."""

    def probability(self, query: str, cached: str, score: float) -> float:
        return self.probability_ref(query, cached, score)


Lookup = tuple[str, list[Candidate]]


def decision_lookups(
    rows: Sequence[dict[str, str]], embedder_name: str
) -> tuple[list[Lookup], Calibration]:
    """Every paraphrase and near-miss of ``rows`` with its top four stored candidates (the
    questions of ``rows``, scored by ``embedder_name``), and the stored questions'
    calibration: what :func:`decide_verified` receives in a cache holding the set."""
    import numpy as np
    from evals.cache_verifier import embedder, unit_vectors

    answers = answers_of(rows)
    stored = list(dict.fromkeys(r["query"] for r in rows))
    asked = [r["paraphrase"] for r in rows] + [r["near_miss"] for r in rows]
    name = {"teacher:minilm": "minilm"}.get(embedder_name, embedder_name)
    vectors = unit_vectors(embedder(name), list(dict.fromkeys(stored + asked)))
    matrix = np.stack([vectors[q] for q in stored])  # (entries, D)

    def cosines(chosen: list[int], pairs: list[tuple[int, int]]) -> list[float]:
        return [float(matrix[chosen[i]] @ matrix[chosen[j]]) for i, j in pairs]

    calibration = measure_calibration(stored, cosines)
    lookups = []
    for text in asked:
        scores = matrix @ vectors[text]  # (entries,)
        top = np.argsort(-scores, kind="stable")[:4]
        lookups.append(
            (
                text,
                [Candidate(int(i), float(scores[i]), stored[i], answers[stored[i]]) for i in top],
            )
        )
    return lookups, calibration


def _decide_all(
    lookups: Sequence[Lookup], calibration: Calibration, verifier: PairVerifier, max_error: float
) -> tuple[float, list[Decision]]:
    """Seconds per lookup of deciding ``lookups``, and the decisions.

    As in a gateway: the per-text and per-pair caches start empty (the per-word ones, stems
    and hash buckets, stay warm: a vocabulary repeats), then the stored questions are seen
    once (each was tokenised when it was itself asked, and profiled by the fast path), and
    each lookup is a question not seen before (it is tokenised in the timed loop)."""
    clear_caches()
    tokenize.cache_clear()
    for stored in dict.fromkeys(c.query for _, candidates in lookups for c in candidates):
        if stored is not None:
            text_profile(stored)
    start = time.perf_counter()
    found = [
        decide_verified(
            text, candidates, calibration=calibration, verifier=verifier, max_error=max_error
        )
        for text, candidates in lookups
    ]
    return (time.perf_counter() - start) / len(lookups), found


def decision_cost(
    rows: Sequence[dict[str, str]], embedder_name: str, max_error: float, rounds: int
) -> dict[str, Any]:
    """The verified decision's cost per lookup, reference vs fast path, in one run (see the
    module docstring); ``rounds`` alternate which path goes first."""
    lookups, calibration = decision_lookups(rows, embedder_name)
    fast = default_verifier()
    reference = ReferenceVerifier(fast.weights, fast.thresholds, fast.trained_on)
    seconds: dict[str, list[float]] = {"reference": [], "fast": []}
    decided: dict[str, list[Decision]] = {}
    for number in range(rounds):
        order = [("reference", reference), ("fast", fast)]
        for name, verifier in order if number % 2 == 0 else order[::-1]:
            took, decided[name] = _decide_all(lookups, calibration, verifier, max_error)
            seconds[name].append(took)
    ref_us = 1e6 * statistics.median(seconds["reference"])
    fast_us = 1e6 * statistics.median(seconds["fast"])
    differing = sum(a != b for a, b in zip(decided["reference"], decided["fast"], strict=True))
    return {
        "embedder": embedder_name,
        "delta": max_error,
        "lookups": len(lookups),
        "rounds": rounds,
        "hits": sum(d.hit for d in decided["fast"]),
        "reference_us": ref_us,
        "fast_us": fast_us,
        "ratio": ref_us / fast_us,
        "differing": differing,
    }


def format_cost(cost: dict[str, Any]) -> str:
    """One line for :func:`decision_cost`'s result."""
    return (
        f"decision cost ({cost['embedder']}, δ {cost['delta']:g}, {cost['lookups']} lookups, "
        f"{cost['hits']} hits, median of {cost['rounds']} rounds): reference "
        f"{cost['reference_us']:.1f} us, fast {cost['fast_us']:.1f} us per lookup "
        f"({cost['ratio']:.2f}x); decisions differing: {cost['differing']}"
    )


async def _miss_path_p50(rows: Sequence[dict[str, str]], max_error: float | None) -> float:
    """p50 seconds of one miss through the cache as the gateway builds it (the ``terms``
    embedder, :class:`MatrixIndex`, no sampled checks): ``alookup`` then ``astore`` of a
    unique probe, in a cache holding the questions of ``rows``."""
    from evals.cache_replay import probe_text

    from evermind.bridges.caching import TermEmbedder
    from evermind.cache.semantic import SemanticCache
    from evermind.cache.verified import Verification
    from evermind.search.matrix import MatrixIndex

    checks = None if max_error is None else Verification(max_error, sample_rate=0.0)
    cache = SemanticCache(
        TermEmbedder(), index=MatrixIndex(), capacity=100_000, max_error=max_error,
        verification=checks,
    )  # fmt: skip
    for row in rows:
        await cache.astore(row["query"], {"text": f"Answer {row['id']}."})
    seconds = []
    for i in range(400):
        text = probe_text(10_000 + i)
        start = time.perf_counter()
        await cache.alookup(text)
        await cache.astore(text, {"text": f"Answer to {text}"})
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def miss_path(rows: Sequence[dict[str, str]], max_error: float, rounds: int) -> dict[str, Any]:
    """The cache's miss path in process, verified (``max_error``) vs the rules, alternating
    over ``rounds``: the median of each one's per-round p50, in milliseconds."""
    found: dict[str, list[float]] = {"verified": [], "rules": []}
    for number in range(rounds):
        order = [("verified", max_error), ("rules", None)]
        for name, delta in order if number % 2 == 0 else order[::-1]:
            found[name].append(asyncio.run(_miss_path_p50(rows, delta)))
    return {name: 1e3 * statistics.median(values) for name, values in found.items()}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_row(row: dict[str, Any]) -> str:
    """One markdown table row (see :data:`HEADER`)."""
    paid_usd = row.get("paid_checks_usd_total")
    overhead_p50 = (row.get("overhead") or {}).get("overhead", {}).get("p50_ms")
    return (
        f"| {row['embedder']} | {row['delta']} | {row['wrong']} / {row['lookups']} "
        f"({row['error']:.3f}) | {row['paraphrase_hit']:.3f} "
        f"({row.get('paraphrase_hit_unchecked', row['paraphrase_hit']):.3f}) | "
        f"{row['near_miss_hit']:.3f} | "
        f"{row.get('checks_total', 0):.0f} / {row.get('check_mismatches_total', 0):.0f} | "
        f"{row.get('paid_checks_total', 0):.0f} (${paid_usd or 0:.4f}), "
        f"{row.get('forced_checks_total', 0):.0f} forced | "
        f"{_ms(row['hit_latency']['p50_ms'])} / {_ms(row['hit_latency']['p99_ms'])} | "
        f"{_ms(row['miss_latency']['p50_ms'])} / {_ms(row['miss_latency']['p99_ms'])} | "
        f"{_ms(overhead_p50)} |"
    )


HEADER = (
    "| embedder | δ | wrong / lookups (rate) | paraphrase hit (unchecked) | near-miss hit | "
    "checks / mismatches | paid checks ($), forced | hit ms p50 / p99 | miss ms p50 / p99 | "
    "miss overhead ms p50 |"
    "\n|---|---|---|---|---|---|---|---|---|---|"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default="report", choices=("report", "tune", "dev"))
    parser.add_argument("--embedders", default="terms", help="comma-separated")
    parser.add_argument("--deltas", default="0.01,0.05", help="comma-separated; 'off' = rules")
    parser.add_argument("--limit", type=int, default=None, help="first N triples of the set")
    parser.add_argument("--verify-sample", type=float, default=0.05)
    parser.add_argument(
        "--no-until-bounded",
        action="store_true",
        help="verify_until_bounded = false: only the sample is checked (the old behaviour)",
    )
    parser.add_argument("--probes", type=int, default=0, help="miss-overhead probes per row")
    parser.add_argument(
        "--decision-rounds", type=int, default=0, help="in-process decision cost, N rounds"
    )
    parser.add_argument(
        "--miss-path", type=int, default=0, help="in-process miss path, verified vs rules, N rounds"
    )
    parser.add_argument("--decision-only", action="store_true", help="only the in-process lines")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    embedders = [e.strip() for e in args.embedders.split(",") if e.strip()]
    deltas = [d.strip() for d in args.deltas.split(",") if d.strip()]
    print(f"set {args.set}" + ("" if args.set == "report" else " (development numbers)"))
    rows = load_set(args.set, args.limit)
    doc: dict[str, Any] = {"bench": "cache_verified", "set": args.set, "triples": len(rows)}
    doc["decision_cost"] = []
    for embedder in embedders if args.decision_rounds > 0 else []:
        for delta in (float(d) for d in deltas if d != "off"):
            doc["decision_cost"].append(decision_cost(rows, embedder, delta, args.decision_rounds))
            print(format_cost(doc["decision_cost"][-1]), flush=True)
    if args.miss_path > 0:
        delta = float(next(d for d in deltas if d != "off"))
        doc["miss_path_ms"] = path = miss_path(rows, delta, args.miss_path)
        print(
            f"miss path in process (terms, {len(rows)} stored, 400 probes, p50, median of "
            f"{args.miss_path} rounds): verified δ {delta:g} {path['verified']:.3f} ms, "
            f"rules {path['rules']:.3f} ms",
            flush=True,
        )
    if not args.decision_only:
        print(HEADER, flush=True)
        doc["rows"] = run(
            args.set,
            embedders,
            deltas,
            args.limit,
            args.verify_sample,
            args.probes,
            not args.no_until_bounded,
        )["rows"]
        doc["verify_until_bounded"] = not args.no_until_bounded
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
