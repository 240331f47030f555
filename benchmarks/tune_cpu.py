"""Benchmark the numpy embedding tuning (``evermind tune-embedder``): seconds per Adam step.

Times :func:`evermind.train.contrastive.tune_embedder` itself (crops, tokenising, forward,
InfoNCE, full backward, Adam) on a real package, at two sizes:

- ``mcp``: the texts the MCP recall test tunes on (the facts of the memory development set:
  short texts, so the padded views are ~10-40 tokens);
- ``default``: long texts (five facts joined), so every view reaches ``max_tokens`` (64) -
  the size ``tune-embedder`` runs at on paragraphs and notes.

Both with the default knobs (batch 32 texts = 64 views). Absolute numbers depend on the
machine and on other load; compare runs made in one session. ``--profile`` prints the
cProfile of the first run instead of timing.

Usage: .venv/bin/python -m benchmarks.tune_cpu --model base.evermind [--steps 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from pathlib import Path

from evals import find

from evermind.model.inference import load
from evermind.train.contrastive import TuneConfig, tune_embedder

DEV_SET = find("memory_recall_dev.jsonl")


def facts(path: Path) -> list[str]:
    """The fact texts of a memory development set (JSON lines, ``type == "fact"``)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [row["content"] for row in rows if row.get("type") == "fact"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a .evermind package")
    parser.add_argument("--set", type=Path, default=DEV_SET, help="memory_recall_dev.jsonl")
    parser.add_argument("--steps", type=int, default=5, help="tuning steps per timed run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per size")
    parser.add_argument("--sizes", default="mcp,default", help="comma-separated: mcp,default")
    parser.add_argument("--profile", action="store_true", help="cProfile one run per size")
    args = parser.parse_args()
    short = facts(args.set)
    texts = {
        "mcp": short,
        "default": [" ".join(short[i : i + 5]) for i in range(0, len(short) - 4)],
    }
    for size in args.sizes.split(","):
        model = load(args.model)
        config = TuneConfig(steps=args.steps, warmup_steps=0)
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            tune_embedder(model, texts[size], config)
            profiler.disable()
            print(f"== {size}: cProfile of {args.steps} steps")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
            continue
        tune_embedder(model, texts[size], TuneConfig(steps=1, warmup_steps=0))  # warm-up
        per_step = []
        for _ in range(args.runs):
            start = time.perf_counter()
            tune_embedder(model, texts[size], config)
            per_step.append((time.perf_counter() - start) / args.steps)
        shown = ", ".join(f"{s:.3f}" for s in per_step)
        print(f"{size}: seconds per step {shown} (min {min(per_step):.3f})")


if __name__ == "__main__":
    main()
