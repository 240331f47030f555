#!/usr/bin/env python3
"""The base embedder side by side, one run: memory recall, speed, size (issue 36, phase 1).

For each embedder: recall@1 and recall@5 on the memory development set through
``MemoryStore.recall`` (``evals.memory``), the embedder alone and hybrid with BM25, beside
lexical only; then ms per text and texts/s embedding ~220-character texts in batches of 32 on
one thread (torch and BLAS limited to one thread; rounds interleaved, the median reported),
parameters and bytes on disk. The embedders:

- ``model2vec``: the PyPI ``model2vec`` library's ``distill`` of the same teacher (PCA 256,
  its defaults), built into ``--model2vec`` when that folder is missing;
- each ``--static NAME=PATH``: a base embedder file (``evermind build-embedder``), numpy path;
  the pure-Python path of the first one is timed too;
- ``minilm``: all-MiniLM-L6-v2, the teacher (``--no-minilm`` skips it).

These are development numbers: measure only, never tune on the set.

Usage:
    .venv/bin/python -m benchmarks.embedder_base \\
        --static distilled=/tmp/distilled.safetensors --static base=base.safetensors
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread, before numpy loads

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
try:
    import evermind  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

from evals import embedders, require  # noqa: E402
from evals.memory import DATA_NAME, evaluate, load  # noqa: E402

from evermind.memory import RecallOptions  # noqa: E402

BATCH = 32
TEXT_CHARS = 220


def speed_texts(count: int) -> list[str]:
    """``count`` texts of about 220 characters from the standard library's docstrings."""
    from evermind.train.corpus import harvest_stdlib_docstrings

    flat = " ".join(harvest_stdlib_docstrings(count * TEXT_CHARS * 2).split())
    return [flat[i : i + TEXT_CHARS] for i in range(0, count * TEXT_CHARS, TEXT_CHARS)]


def time_batches(embed: Callable[[Sequence[str]], Any], texts: Sequence[str]) -> float:
    """Seconds to embed ``texts`` in batches of 32."""
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        embed(texts[start : start + BATCH])
    return time.perf_counter() - started


def folder_bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build_model2vec(folder: Path) -> None:
    """Distils model2vec from the MiniLM teacher into ``folder`` (its defaults, PCA 256)."""
    from model2vec.distill import distill

    from evermind.train.teachers import minilm_dir

    distilled = distill(model_name=str(minilm_dir()), pca_dims=256, device="cpu")
    distilled.save_pretrained(str(folder))


def contenders(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Name, memoised eval embedder, raw (uncached) embed function, params, bytes."""
    from model2vec import StaticModel

    from evermind.embedder.static import StaticEmbedder

    out: list[dict[str, Any]] = []
    if not (args.model2vec / "model.safetensors").is_file():
        build_model2vec(args.model2vec)
    m2v = StaticModel.from_pretrained(str(args.model2vec))
    out.append({
        "name": "model2vec (distil, PCA 256)",
        "eval": embedders.model2vec(args.model2vec),
        "raw": lambda texts, m=m2v: m.encode(list(texts)),
        "params": int(m2v.embedding.shape[0] * m2v.embedding.shape[1]),
        "bytes": folder_bytes(args.model2vec),
    })  # fmt: skip
    for number, spec in enumerate(args.static):
        name, _, path = spec.partition("=")
        static = StaticEmbedder.load(path)
        out.append({
            "name": f"{name} ({static.dims}-d {static.storage})",
            "eval": embedders.static(path),
            "fresh": lambda p=path: StaticEmbedder.load(p),
            "params": static.n_params,
            "bytes": Path(path).stat().st_size,
            "python": number == 0,
        })  # fmt: skip
    if not args.no_minilm:
        from evermind.train.teachers import MiniLMTeacher, minilm_dir

        teacher = MiniLMTeacher(batch_size=BATCH)
        out.append({
            "name": "all-MiniLM-L6-v2 (teacher)",
            "eval": embedders.minilm,
            "raw": teacher.embed,
            "params": teacher.n_params,
            "bytes": (minilm_dir() / "model.safetensors").stat().st_size,
        })  # fmt: skip
    return out


def recall_rows(runs: list[dict[str, Any]], data: Path | None) -> dict[str, dict[str, float]]:
    """R@1 / R@5 on the memory set: lexical, then each embedder alone and hybrid."""
    facts, questions = load(data if data is not None else require(DATA_NAME))
    rows: dict[str, dict[str, float]] = {}
    table, _ = asyncio.run(evaluate(facts, questions, None, RecallOptions()))
    rows["lexical (BM25)"] = table["all"]
    for run in runs:
        for mode, options in (("alone", RecallOptions(lexical=False)), ("hybrid", RecallOptions())):
            table, _ = asyncio.run(evaluate(facts, questions, run["eval"], options))
            rows[f"{run['name']} {mode}"] = table["all"]
            print(f"  {run['name']} {mode}: R@1 {table['all']['r@1']:.3f}", file=sys.stderr)
    return rows


def speeds(runs: list[dict[str, Any]], count: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median ms per text and texts/s over interleaved rounds (batches of 32, one thread)."""
    import torch

    torch.set_num_threads(1)
    texts = speed_texts(count)
    timings: dict[str, list[float]] = {}
    for _ in range(rounds):
        for run in runs:
            embed = run["fresh"]().embed_numpy if "fresh" in run else run["raw"]
            embed(texts[:BATCH])  # warm: imports, the tokenizer's word memo is per instance
            timings.setdefault(run["name"], []).append(time_batches(embed, texts))
            if run.get("python"):
                fresh = run["fresh"]()
                name = run["name"].replace(")", ", pure Python)")
                timings.setdefault(name, []).append(time_batches(fresh.embed_python, texts))
    return {
        name: {
            "ms_per_text": 1000 * statistics.median(seconds) / len(texts),
            "texts_per_s": len(texts) / statistics.median(seconds),
        }
        for name, seconds in timings.items()
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--static", action="append", default=[], help="NAME=PATH, repeatable")
    parser.add_argument(
        "--model2vec", type=Path, default=Path("build/model2vec-minilm-256"),
        help="model2vec folder (distilled here when missing)",
    )  # fmt: skip
    parser.add_argument("--no-minilm", action="store_true", help="skip the teacher")
    parser.add_argument("--data", type=Path, help=f"the memory set (default: {DATA_NAME})")
    parser.add_argument("--texts", type=int, default=512, help="texts per speed round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved speed rounds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    runs = contenders(args)
    recall = recall_rows(runs, args.data)
    speed = speeds(runs, args.texts, args.rounds)
    print("| embedder | mode | R@1 | R@5 |\n|---|---|---|---|")
    for name, row in recall.items():
        print(f"| {name} | | {row['r@1']:.3f} | {row['r@5']:.3f} |")
    print("\n| embedder | ms/text | texts/s (batch 32, 1 thread) | parameters | bytes |")
    print("|---|---|---|---|---|")
    sizes = {run["name"]: run for run in runs}
    for name, row in speed.items():
        run = sizes.get(name, {})
        params = f"{run['params']:,}" if run else "same"
        size = f"{run['bytes']:,}" if run else "same"
        cells = f"{row['ms_per_text']:.3f} | {row['texts_per_s']:,.0f} | {params} | {size}"
        print(f"| {name} | {cells} |")
    if args.json:
        report = {"recall": recall, "speed": speed}
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
