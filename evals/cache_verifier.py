"""Trains the cache's pair verifier on the corpus's tune split and ships its bounded thresholds.

What it does, in order (``python -m evals.cache_verifier --help``):

1. Loads the ``tune`` split of ``evals/cache_corpus`` (triples: query, paraphrase, near-miss)
   and embeds every text with each ``--embedder`` (``terms``: the gateway's model-free
   embedder; ``trigram``: the tab's lexical vectors; ``minilm``: the local all-MiniLM-L6-v2;
   ``package:PATH``: a ``.evermind`` package; ``static:PATH``: a base embedder file,
   ``evermind build-embedder``'s).
2. Per embedder, calibrates like the cache does (the high quantile of cosines between
   *unrelated* stored queries, :func:`evermind.search.calibration.calibrate`) and turns each pair's
   cosine into the normalised score (:meth:`PairVerifier.normalise`).
   The pairs are those a *read-through* cache meets (:func:`pair_rows`): queries stored,
   then paraphrases and near-misses looked up in a seeded order and stored as misses are.
3. Fits one L2-regularised logistic model (Newton steps, numpy) on the pairs of every
   embedder: (query, paraphrase) labelled 1, (query, near-miss) labelled 0.
4. Cross-fits (5 folds grouped by *domain*, so each fold is judged by a model that never
   saw its topics, as a held-out set asks about other topics) to get an out-of-fold
   probability for every tune pair, and for each ``δ`` picks, on the lookups' best
   candidates, the lowest probability whose share of wrongly answered lookups stays ≤ δ at
   95% confidence
   (:func:`evermind.search.risk.bounded_threshold`), per embedder; the shipped threshold is
   the strictest over the embedders (one threshold must hold for all of them).
5. Writes ``src/evermind/cache/data/verifier.json`` (``--out``).

Only aggregate numbers of the tune split are printed. The ``report`` split is never read
here; ``evals/cache_verified.py`` reports on it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals import cache_corpus
from evermind.cache.verifier import PairVerifier, envelope, pair_features
from evermind.search.calibration import calibrate
from evermind.search.risk import bounded_threshold, served_error

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "evermind" / "cache" / "data" / "verifier.json"
DELTAS = (0.01, 0.02, 0.05, 0.1)
BatchEmbed = Callable[[list[str]], Sequence[Sequence[float]]]


def embedder(name: str) -> BatchEmbed:
    """A batch embedder by name (see the module docstring)."""
    if name == "terms":
        from evermind.bridges.caching import TermEmbedder

        terms = TermEmbedder()
        return lambda texts: [terms(t) for t in texts]
    if name == "trigram":
        from evermind.studio.tab_memory import trigram_vector

        return lambda texts: [trigram_vector(t) for t in texts]
    if name == "minilm":
        from evermind.train.teachers import MiniLMTeacher

        teacher = MiniLMTeacher()
        return lambda texts: [list(map(float, v)) for v in teacher.embed(texts)]
    if name.startswith("package:"):
        import evermind

        model = evermind.load(Path(name.partition(":")[2]))
        return lambda texts: [list(map(float, v)) for v in model.embed(texts)]
    if name.startswith("static:"):
        from evermind.embedder.static import StaticEmbedder

        base = StaticEmbedder.load(Path(name.partition(":")[2]))
        return lambda texts: [list(map(float, v)) for v in base.embed_numpy(texts)]
    raise SystemExit(
        f"unknown embedder {name!r}: terms, trigram, minilm, package:PATH or static:PATH"
    )


def unit_vectors(embed: BatchEmbed, texts: list[str]) -> dict[str, np.ndarray]:
    """Every text's L2-normalised vector, embedded in batches of 64."""
    out: dict[str, np.ndarray] = {}
    for start in range(0, len(texts), 64):
        batch = texts[start : start + 64]
        for text, vector in zip(batch, embed(batch), strict=True):
            v = np.asarray(vector, dtype=np.float64)
            out[text] = v / (np.linalg.norm(v) or 1.0)
    return out


def unrelated_quantile(vectors: dict[str, np.ndarray], queries: list[str]) -> float | None:
    """The cache's calibration of this embedder over a sample of stored queries."""
    sample = random.Random(0).sample(queries, min(96, len(queries)))
    cosines = [
        float(vectors[a] @ vectors[b]) for i, a in enumerate(sample) for b in sample[i + 1 :]
    ]
    return calibrate(cosines).unrelated


def pair_rows(
    triples: list[Any], vectors: dict[str, np.ndarray], unrelated: float | None, top: int = 3
) -> tuple[list[tuple[str, dict[str, float], int]], list[int]]:
    """The pairs the decision faces in a read-through cache, labelled, and which of them are
    a lookup's best candidate.

    As the gateway runs: every tune query is stored; then every paraphrase and near-miss is
    looked up in a seeded shuffle and, as a miss would be, stored with its own answer, so
    near-misses end up beside their originals and a later paraphrase may meet a stored
    near-miss. Each lookup's ``top`` nearest stored texts are candidates; a pair is right (1)
    when the candidate holds the looked-up text's answer. The direct pairs (query,
    paraphrase) and (query, near-miss) are added when not among the candidates. Rows are
    ``(triple id of the looked-up text, features, label)``; the second list indexes the rows
    that are a lookup's best candidate (the population the served error is measured on).
    """
    dim = len(next(iter(vectors.values())))
    texts = [t.query for t in triples]
    answers = [t.id for t in triples]
    matrix = np.zeros((len(triples) * 3, dim))
    matrix[: len(triples)] = np.stack([vectors[t] for t in texts])
    lookups = [(i, "paraphrase") for i in range(len(triples))]
    lookups += [(i, "near_miss") for i in range(len(triples))]
    random.Random(3).shuffle(lookups)
    rows: list[tuple[str, dict[str, float], int]] = []
    firsts: list[int] = []
    for i, field in lookups:
        t = triples[i]
        text = getattr(t, field)
        answer = t.id if field == "paraphrase" else f"{t.id}/near-miss"
        sims = matrix[: len(texts)] @ vectors[text]
        order = [int(j) for j in np.argsort(-sims)[:top]]
        if i not in order:
            order.append(i)
        for rank, j in enumerate(order):
            score = PairVerifier.normalise(float(sims[j]), unrelated)
            if rank == 0:
                firsts.append(len(rows))
            label = int(answers[j] == answer)
            rows.append((t.id, dict(pair_features(text, texts[j], score)), label))
        matrix[len(texts)] = vectors[text]  # stored, as a miss is
        texts.append(text)
        answers.append(answer)
    return rows, firsts


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """L2-regularised logistic regression by Newton steps (the bias, column 0, unpenalised)."""
    w = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(30):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -60, 60)))
        grad = x.T @ (p - y) + penalty * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-7:
            break
    return w


def design(rows: list[tuple[str, dict[str, float], int]], names: list[str]) -> np.ndarray:
    index = {n: i for i, n in enumerate(names)}
    x = np.zeros((len(rows), len(names)))
    for r, (_, feats, _) in enumerate(rows):
        for name, value in feats.items():
            if name in index:
                x[r, index[name]] = value
    return x


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC (Mann–Whitney, ties count half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", action="append", default=None, help="repeatable")
    parser.add_argument("--l2", type=float, default=1.0, help="L2 penalty of the logistic fit")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    names_embedders = args.embedder or ["terms", "trigram", "minilm"]
    triples = cache_corpus.triples("tune")
    print(f"tune split: {len(triples)} triples; embedders: {', '.join(names_embedders)}")
    by_embedder: dict[str, list[tuple[str, dict[str, float], int]]] = {}
    first_rows: dict[str, list[int]] = {}
    for name in names_embedders:
        tick = time.perf_counter()
        texts = sorted(
            {getattr(t, f) for t in triples for f in ("query", "paraphrase", "near_miss")}
        )
        vectors = unit_vectors(embedder(name), texts)
        unrelated = unrelated_quantile(vectors, [t.query for t in triples])
        by_embedder[name], first_rows[name] = pair_rows(triples, vectors, unrelated)
        print(f"  {name}: unrelated q99 {unrelated}, {time.perf_counter() - tick:.1f} s")
    all_rows = [row for rows in by_embedder.values() for row in rows]
    names = ["bias", *sorted({n for _, f, _ in all_rows for n in f} - {"bias"})]
    # Folds by domain: each fold's probabilities come from a model that never saw its topics,
    # as the report split and a held-out set ask about other topics than the tune split.
    domains = sorted({t.domain for t in triples})
    fold_of_domain = {
        d: i % args.folds for i, d in enumerate(random.Random(1).sample(domains, len(domains)))
    }
    fold_of = {t.id: fold_of_domain[t.domain] for t in triples}
    oof: dict[str, np.ndarray] = {}
    for name, rows in by_embedder.items():
        oof[name] = np.zeros(len(rows))
    for fold in range(args.folds):
        train = [r for r in all_rows if fold_of[r[0]] != fold]
        w = fit_logistic(design(train, names), np.array([r[2] for r in train], float), args.l2)
        # What the cache will compute: the model's monotone envelope (PairVerifier.probability).
        fold_model = PairVerifier(dict(zip(names, (float(v) for v in w), strict=True)), {})
        for name, rows in by_embedder.items():
            held = [i for i, r in enumerate(rows) if fold_of[r[0]] == fold]
            oof[name][held] = [envelope(fold_model, rows[i][1]) for i in held]
    thresholds: dict[str, float] = {}
    print("\nout-of-fold on the tune split (development numbers):")
    print(
        "embedder | AUC (all pairs) | "
        + " | ".join(f"δ={d}: thr / para hit / wrong of lookups" for d in DELTAS)
    )
    per_delta: dict[float, list[float]] = {d: [] for d in DELTAS}
    for name, rows in by_embedder.items():
        labels = np.array([r[2] for r in rows])
        firsts = first_rows[name]
        # The error is measured where the cache serves: each lookup's best candidate. Half the
        # lookups are near-misses, far more than real traffic holds: the bound is conservative.
        top_p = [float(oof[name][i]) for i in firsts]
        top_ok = [bool(labels[i]) for i in firsts]
        paraphrases = len(firsts) // 2  # one paraphrase and one near-miss lookup per triple
        cells = []
        for d in DELTAS:
            thr = bounded_threshold(top_p, top_ok, d)
            if thr is None:
                cells.append("none")
                per_delta[d].append(float("inf"))
                continue
            per_delta[d].append(thr)
            wrong, _ = served_error(top_p, top_ok, thr)
            hit = (
                sum(1 for p, ok in zip(top_p, top_ok, strict=True) if ok and p >= thr) / paraphrases
            )
            cells.append(f"{thr:.3f} / {hit:.3f} / {wrong}/{len(firsts)}")
        print(f"{name} | {auc(oof[name], labels):.3f} | " + " | ".join(cells))
    for d in DELTAS:
        worst = max(per_delta[d])
        if worst != float("inf"):
            thresholds[f"{d}"] = round(worst, 6)
    w = fit_logistic(design(all_rows, names), np.array([r[2] for r in all_rows], float), args.l2)
    weights = {n: round(float(v), 6) for n, v in zip(names, w, strict=True) if abs(v) > 1e-9}
    verifier = PairVerifier(
        weights,
        thresholds,
        f"evals/cache_corpus tune split, {len(triples)} triples, embedders "
        f"{', '.join(names_embedders)}; l2 {args.l2}",
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(verifier.to_json(), indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"\nthresholds (strictest over embedders): {thresholds}\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
