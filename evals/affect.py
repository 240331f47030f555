"""The affect head on ``affect_dev.jsonl`` against a bag-of-words baseline.

``python -m evals.affect [--model PACKAGE]`` embeds the 150 labelled texts of
``evals/affect_dev.jsonl`` (negative / neutral / positive, 50 each) once with the package's
raw pooled vector, then fits the affect head exactly as ``evermind train-affect`` does
(:func:`evermind.train.affect_fit.fit_affect_features`, numpy optimiser) on repeated
stratified 80/20 splits (seeds 0..N-1) and prints the held-out accuracy and macro-F1, mean
and spread over the splits. The same fit on other features is the comparison:

- ``bow``: binary bag of words (lower-cased ``[a-z']+`` tokens): the baseline;
- ``embedder``: the package's embedding (its distilled head applied, when it has one) — not
  what the affect head takes, shown to say where the affect signal lives.

Several L2 strengths are reported for each, all on the same splits, so no row is tuned on
its own test data more than another. The package is only read.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import evermind
from evermind.train.affect import logistic_fit_np
from evermind.train.affect_fit import AffectConfig, fit_affect_features

HERE = Path(__file__).resolve().parent
DEFAULT_SET = HERE / "affect_dev.jsonl"
DEFAULT_MODEL = HERE.parent / "dist" / "demo" / "evermind-default.evermind"
WORD = re.compile(r"[a-z']+")


def load_set(path: Path) -> tuple[list[str], list[str]]:
    """``(texts, labels)`` of a ``{"text", "label"}`` JSON-lines file."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [r["text"] for r in rows], [r["label"] for r in rows]


def bag_of_words(texts: list[str]) -> np.ndarray:
    """Binary word-presence rows (N, vocabulary)."""
    vocab = sorted({w for t in texts for w in WORD.findall(t.lower())})
    index = {w: i for i, w in enumerate(vocab)}
    out = np.zeros((len(texts), len(vocab)))
    for row, text in enumerate(texts):
        for word in WORD.findall(text.lower()):
            out[row, index[word]] = 1.0
    return out


def score(
    features: np.ndarray, labels: list[str], l2: float, splits: int
) -> dict[str, float | int]:
    """Held-out accuracy and macro-F1 (mean, standard deviation) over ``splits`` seeds."""
    accuracy, macro = [], []
    rows = features.tolist()
    for seed in range(splits):
        config = AffectConfig(l2=l2, seed=seed)
        fit = fit_affect_features(rows, labels, config=config, optimiser=logistic_fit_np)
        accuracy.append(fit.metrics["accuracy"])
        macro.append(fit.metrics["macro_f1"])
    return {
        "accuracy": round(statistics.mean(accuracy), 3),
        "accuracy_sd": round(statistics.stdev(accuracy), 3),
        "macro_f1": round(statistics.mean(macro), 3),
        "macro_f1_sd": round(statistics.stdev(macro), 3),
        "held_out": fit.held_out,
        "dim": features.shape[1],
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the comparison and prints one JSON line per (features, L2)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="the .evermind package")
    parser.add_argument("--set", type=Path, default=DEFAULT_SET, help="the labelled JSON lines")
    parser.add_argument("--splits", type=int, default=20, help="stratified 80/20 splits")
    parser.add_argument("--l2", type=float, nargs="+", default=[0.01, 0.1, 1.0])
    args = parser.parse_args(argv)
    texts, labels = load_set(args.set)
    model = evermind.load(args.model)
    start = time.perf_counter()
    raw = model.embed_raw(texts).astype(np.float64)
    embedded = model.embed(texts).astype(np.float64)
    print(
        f"{model.name}: embedded {len(texts)} texts in {time.perf_counter() - start:.1f} s",
        file=sys.stderr,
    )
    features = {"affect head (raw pooled)": raw, "bow": bag_of_words(texts), "embedder": embedded}
    for name, rows in features.items():
        for l2 in args.l2:
            print(json.dumps({"features": name, "l2": l2, **score(rows, labels, l2, args.splits)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
