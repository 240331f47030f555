"""The verified cache measured the way it is used, on data it was not tuned on.

One full cache per (embedder, δ): every stored query of the chosen set goes into ONE
:class:`evermind.cache.SemanticCache` with ``max_error=δ`` (the verified decision), then every
paraphrase and near-miss is looked up through its real ``lookup``. Reported, aggregates only:

- **paraphrase hit**: a paraphrase served its own entry's answer (share of paraphrases);
- **wrong**: answers served that were wrong — a paraphrase served another entry, or a
  near-miss served anything — as a count and as a share of all lookups (the error δ bounds,
  vCache's error rate; half of these lookups are near-misses, far more than real traffic);
- **near-miss hit**: the share of near-misses served.

Beside it, the **static threshold** cache GPTCache runs: the nearest entry is served when its
cosine reaches one fixed threshold. Its threshold is chosen on the corpus's *tune* split, the
lowest whose served error stays ≤ δ at 95% confidence (the same bound), then applied here, so
the two are compared at the same promised error.

Sets (``--set``): ``report`` (the corpus split never tuned on; never printed case by case),
``tune`` (development numbers), ``dev`` (the shared ``cache_pairs_dev.jsonl``, the untouched
third check). Usage::

    PYTHONPATH=src .venv/bin/python -m evals.cache_verified --set report --embedder terms
    PYTHONPATH=src .venv/bin/python -m evals.cache_verified --set dev --embedder minilm
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals import cache_corpus, require
from evals.cache_verifier import embedder, unit_vectors
from evermind.cache import SemanticCache
from evermind.search.risk import bounded_threshold

DELTAS = (0.01, 0.05)


def load_set(name: str) -> list[dict[str, str]]:
    """The triples of ``name`` as dicts with id, query, paraphrase, near_miss."""
    if name in ("report", "tune"):
        return [
            {"id": t.id, "query": t.query, "paraphrase": t.paraphrase, "near_miss": t.near_miss}
            for t in cache_corpus.triples(name)
        ]
    if name == "dev":
        path = require("cache_pairs_dev.jsonl")
        with path.open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    raise SystemExit(f"unknown set {name!r}: report, tune or dev")


def verified_cache(
    rows: list[dict[str, str]], vectors: dict[str, np.ndarray], name: str, delta: float
) -> dict[str, Any]:
    """The product's lookup over one full cache of ``rows``; aggregate counts."""
    cache = SemanticCache(
        lambda text: vectors[text].tolist(),
        fingerprint=f"eval-{name}",
        capacity=100_000,
        max_error=delta,
    )
    for row in rows:
        cache.store(row["query"], f"answer:{row['id']}")
    own = wrong = near = 0
    tick = time.perf_counter()
    for row in rows:
        para = cache.lookup(row["paraphrase"])
        if para.hit:
            if para.response == f"answer:{row['id']}":
                own += 1
            else:
                wrong += 1
        near += cache.lookup(row["near_miss"]).hit
    ms = 1000 * (time.perf_counter() - tick) / (2 * len(rows))
    return _summary(len(rows), own, wrong, near, ms)


def _summary(n: int, own: int, wrong: int, near: int, ms: float) -> dict[str, Any]:
    return {
        "paraphrase_hit": own / n,
        "near_miss_hit": near / n,
        "wrong": wrong + near,
        "lookups": 2 * n,
        "error": (wrong + near) / (2 * n),
        "lookup_ms": ms,
    }


def static_threshold(
    tune_vectors: dict[str, np.ndarray], tune: list[dict[str, str]], delta: float
) -> float | None:
    """GPTCache's one cosine threshold, chosen on the tune split as the verified cache's is:
    the lowest whose share of wrongly answered lookups (nearest stored query served) stays
    ≤ δ at 95% confidence."""
    stored = np.stack([tune_vectors[r["query"]] for r in tune])
    scores, correct = [], []
    for i, row in enumerate(tune):
        for field in ("paraphrase", "near_miss"):
            sims = stored @ tune_vectors[row[field]]
            best = int(np.argmax(sims))
            scores.append(float(sims[best]))
            correct.append(field == "paraphrase" and best == i)
    return bounded_threshold(scores, correct, delta)


def static_cache(
    rows: list[dict[str, str]], vectors: dict[str, np.ndarray], tau: float | None
) -> dict[str, Any]:
    """Nearest entry served when its cosine reaches ``tau`` (None: nothing served)."""
    stored = np.stack([vectors[r["query"]] for r in rows])
    own = wrong = near = 0
    for i, row in enumerate(rows):
        for field in ("paraphrase", "near_miss"):
            sims = stored @ vectors[row[field]]
            best = int(np.argmax(sims))
            if tau is None or sims[best] < tau:
                continue
            if field == "near_miss":
                near += 1
            elif best == i:
                own += 1
            else:
                wrong += 1
    return _summary(len(rows), own, wrong, near, 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default="report", choices=("report", "tune", "dev"))
    parser.add_argument("--embedder", action="append", default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = load_set(args.set)
    tune = load_set("tune")
    results = []
    print(
        f"set {args.set}: {len(rows)} triples"
        + ("  (development numbers)" if args.set != "report" else "")
    )
    print("embedder | δ | cache | paraphrase hit | near-miss hit | wrong / lookups | error | ms")
    for name in args.embedder or ["terms", "trigram", "minilm"]:
        embed = embedder(name)
        texts = sorted({r[f] for r in rows + tune for f in ("query", "paraphrase", "near_miss")})
        vectors = unit_vectors(embed, texts)
        for delta in DELTAS:
            for kind, found in (
                ("verified", verified_cache(rows, vectors, name, delta)),
                ("static", static_cache(rows, vectors, static_threshold(vectors, tune, delta))),
            ):
                results.append(
                    {"set": args.set, "embedder": name, "delta": delta, "cache": kind, **found}
                )
                print(
                    f"{name} | {delta} | {kind} | {found['paraphrase_hit']:.3f} | "
                    f"{found['near_miss_hit']:.3f} | {found['wrong']} / {found['lookups']} | "
                    f"{found['error']:.3f} | {found['lookup_ms']:.2f}"
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
