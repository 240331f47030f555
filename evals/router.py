#!/usr/bin/env python3
"""Scores the inference router on ``evals/router_set.jsonl``, with and without the SSM's
confidence signal, and measures the thresholds of ``RouterConfig``.

Each row of the set is one request labelled ``local`` (a short in-domain continuation or
lookup of the corpus the local model trained on: the standard library's docstrings) or
``frontier`` (reasoning, code, long context, tools, out of domain), with a short why.

The local model is a ``.evermind`` package (``--model``) or, by default, a small model
trained here on the embedded default corpus with the numpy CPU backend (seconds; the same
job as ``evermind train --device cpu``, smaller)::

    PYTHONPATH=src .venv/bin/python -m evals.router --fit --json router.json

``--fit`` grid-searches ``max_surprise`` and ``max_local_prompt_tokens`` on the even rows
and reports accuracy on the odd rows (and on all), once with the confidence signal and once
without it (its best length threshold refitted), so the difference is the signal's own.
Without ``--fit`` the router runs with its defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run by its file path rather than as ``-m evals.router``
    sys.path.insert(0, str(ROOT))
try:
    import evermind
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

from evermind.agent.router import InferenceRouter, ModelConfidence, RouterConfig  # noqa: E402
from evermind.bridges import ChatRequest, Message  # noqa: E402

SET = ROOT / "evals" / "router_set.jsonl"
#: The grid ``--fit`` searches.
SURPRISE_GRID = [round(0.1 * i, 2) for i in range(-5, 31)]
LENGTH_GRID = [16, 24, 32, 40, 48, 64, 96, 128, 192, 256]


def load_set(path: Path = SET) -> list[dict[str, Any]]:
    """The labelled rows."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def request_of(row: dict[str, Any]) -> ChatRequest:
    """The ChatRequest of one row (a single user turn, with its tools if any)."""
    return ChatRequest(
        model="evermind/auto",
        messages=(Message("user", row["text"]),),
        tools=tuple(row.get("tools") or ()),
    )


def train_default_model(
    corpus_bytes: int = 1_000_000,
    steps: int = 600,
    d_model: int = 64,
    vocab_size: int = 1024,
    seed: int = 0,
) -> evermind.Model:
    """A small model trained on the default corpus (stdlib docstrings) on the CPU."""
    from evermind.job import (
        JobConfig,
        default_corpus,
        export_package,
        split,
        tokenize,
        train_tokenizer,
    )
    from evermind.model.config import MambaConfig
    from evermind.model.init import init_params
    from evermind.train.cpu_backend import CpuBackend
    from evermind.train.loop import Trainer
    from evermind.types import TrainConfig

    text, description = default_corpus(corpus_bytes)
    tokenizer = train_tokenizer(text, vocab_size)
    eos = tokenizer.eos_id or 0
    config = MambaConfig(
        d_model=d_model,
        n_layer=2,
        vocab_size=tokenizer.vocab_size,
        d_state=8,
        eos_token_id=eos,
        bos_token_id=eos,
        pad_token_id=eos,
    )
    job = JobConfig(
        name="router-eval",
        seed=seed,
        train=TrainConfig(
            steps=steps, batch_size=4, seq_len=64, lr=5e-3, warmup_steps=10, eval_every=0
        ),
    )
    backend = CpuBackend(config, init_params(config, seed), job.train)
    train_ids, held = split(job, tokenize(tokenizer, text))
    result = asyncio.run(Trainer(backend, train_ids, held, job.train).run())
    data = export_package(job, config, backend.params(), tokenizer, result, description, "cpu")
    return evermind.load(data)


def memoised(function: Callable[[str], float | None]) -> Callable[[str], float | None]:
    """``function`` computed once per text (the grid search re-asks the same texts)."""
    seen: dict[str, float | None] = {}

    def call(text: str) -> float | None:
        if text not in seen:
            seen[text] = function(text)
        return seen[text]

    return call


def score(router: InferenceRouter, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy, the confusion matrix and accuracy per kind of row."""
    confusion = {"local": {"local": 0, "frontier": 0}, "frontier": {"local": 0, "frontier": 0}}
    per_why: dict[str, list[int]] = {}
    reasons: dict[str, int] = {}
    for row in rows:
        decision = router.decide(request_of(row))
        confusion[row["label"]][decision.target] += 1
        right = int(decision.target == row["label"])
        per_why.setdefault(row["why"], [0, 0])
        per_why[row["why"]][0] += right
        per_why[row["why"]][1] += 1
        reasons[decision.reason] = reasons.get(decision.reason, 0) + 1
    correct = confusion["local"]["local"] + confusion["frontier"]["frontier"]
    return {
        "accuracy": round(correct / max(1, len(rows)), 4),
        "n": len(rows),
        "confusion": confusion,
        "per_why": {k: f"{a}/{n}" for k, (a, n) in sorted(per_why.items())},
        "reasons": dict(sorted(reasons.items())),
    }


def fit(
    rows: Sequence[dict[str, Any]],
    confidence: Callable[[str], float | None] | None,
    base: RouterConfig,
) -> RouterConfig:
    """The config of the grid with the best accuracy on ``rows`` (ties: the largest
    thresholds, which send the most to the local model)."""
    best: tuple[float, float, int] | None = None
    chosen = base
    surprises = SURPRISE_GRID if confidence is not None else [base.max_surprise]
    for length in LENGTH_GRID:
        for surprise in surprises:
            config = replace(base, max_surprise=surprise, max_local_prompt_tokens=length)
            accuracy = score(InferenceRouter(config, confidence), rows)["accuracy"]
            key = (accuracy, surprise, length)
            if best is None or key > best:
                best, chosen = key, config
    return chosen


def evaluate(
    model: Any, rows: Sequence[dict[str, Any]], do_fit: bool, base: RouterConfig | None = None
) -> dict[str, Any]:
    """The report: with and without the confidence signal (fitted or at ``base``)."""
    config = base or RouterConfig()
    confidence = memoised(ModelConfidence(model))
    start = time.perf_counter()
    for row in rows:
        confidence(row["text"][: config.confidence_chars])
    per_request_ms = 1000 * (time.perf_counter() - start) / max(1, len(rows))
    report: dict[str, Any] = {"confidence_ms_per_request": round(per_request_ms, 2)}
    off = replace(config, use_confidence=False)
    if do_fit:
        train, test = list(rows[0::2]), list(rows[1::2])
        config = fit(train, confidence, config)
        off = fit(train, None, off)
        report["fitted_on"] = "even rows"
        for name, subset in (("test_odd_rows", test), ("all_rows", rows)):
            report[name] = {
                "with_confidence": score(InferenceRouter(config, confidence), subset),
                "without_confidence": score(InferenceRouter(off, confidence), subset),
            }
    else:
        report["all_rows"] = {
            "with_confidence": score(InferenceRouter(config, confidence), rows),
            "without_confidence": score(InferenceRouter(off, confidence), rows),
        }
    report["config_with_confidence"] = {
        "max_surprise": config.max_surprise,
        "max_local_prompt_tokens": config.max_local_prompt_tokens,
    }
    report["config_without_confidence"] = {"max_local_prompt_tokens": off.max_local_prompt_tokens}
    return report


def compare_signals(model: Any, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How well candidate confidence signals separate the rows that reach the confidence
    check (no override, tools, context, length or task decided them): for each, the best
    single threshold's accuracy on those rows (in-sample). Signals, each minus the model's
    training loss where it is in nats: the mean token NLL (what the router uses), the mean
    entropy of the next-token distribution, the 90th percentile token NLL, and the share of
    tokens with an NLL over 3 nats above the training loss."""
    import numpy as np

    from evermind.ops.cross_entropy import cross_entropy_fwd

    baseline = ModelConfidence(model).baseline
    reach = [
        row
        for row in rows
        if InferenceRouter(RouterConfig(use_confidence=False)).decide(request_of(row)).reason
        == "confident"
    ]
    values: dict[str, list[tuple[float, bool]]] = {"nll": [], "entropy": [], "p90": [], "share": []}
    for row in reach:
        ids = np.array(model.tokenizer.encode(row["text"][:1024]), np.int64)
        if ids.size < 2:
            continue
        logits = model.cpu.forward(ids[None, :-1])[0].astype(np.float64)
        nll = cross_entropy_fwd(logits, ids[1:])
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        entropy = -(p * np.log(p + 1e-30)).sum(1)
        frontier = row["label"] == "frontier"
        values["nll"].append((float(nll.mean()) - baseline, frontier))
        values["entropy"].append((float(entropy.mean()) - baseline, frontier))
        values["p90"].append((float(np.quantile(nll, 0.9)) - baseline, frontier))
        values["share"].append((float((nll > baseline + 3).mean()), frontier))
    out: dict[str, Any] = {"rows": len(reach)}
    for name, pairs in values.items():
        best = max((sum((v > t) == f for v, f in pairs), t) for t in sorted({v for v, _ in pairs}))
        out[name] = {"correct": best[0], "of": len(pairs), "threshold": round(best[1], 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a .evermind package (default: train one)")
    parser.add_argument("--set", type=Path, default=SET)
    parser.add_argument("--steps", type=int, default=600, help="training steps of the default")
    parser.add_argument("--corpus-bytes", type=int, default=1_000_000)
    parser.add_argument("--fit", action="store_true", help="measure the thresholds")
    parser.add_argument(
        "--signals", action="store_true", help="also compare candidate confidence signals"
    )
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.model is not None:
        model = evermind.load(args.model)
    else:
        model = train_default_model(args.corpus_bytes, args.steps)
    rows = load_set(args.set)
    report = {
        "model": model.name,
        "training": {
            k: model.package.manifest.get("training", {}).get(k)
            for k in ("corpus", "steps", "final_loss")
        },
        **evaluate(model, rows, args.fit),
        **({"signals": compare_signals(model, rows)} if args.signals else {}),
        "seconds": round(time.perf_counter() - start, 1),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
