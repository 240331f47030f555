"""Benchmark the numpy embedding tuning (``evermind tune-embedder``): seconds per Adam step.

Times :func:`evermind.train.contrastive.tune_embedder` itself (crops, tokenising, forward,
InfoNCE, full backward, Adam) on a real package, at two sizes:

- ``mcp``: the texts the MCP recall test tunes on (the facts of the memory development set:
  short texts, so the padded views are ~10-40 tokens);
- ``default``: long texts (five facts joined), so every view reaches ``max_tokens`` (64) -
  the size ``tune-embedder`` runs at on paragraphs and notes.

Both with the default knobs (batch 32 texts = 64 views). Absolute numbers depend on the
machine and on other load; compare runs made in one session. ``--profile`` prints the
cProfile of the first run instead of timing. ``--scans fast,reference`` times the tuning on
the fast scan (what it runs) and on the reference scan, run by run in turn.

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
    parser.add_argument("--scans", default="fast", help="comma-separated: fast,reference")
    args = parser.parse_args()
    if args.profile:
        profile(args.model, texts_of(args.set), args.sizes.split(","), args.steps)
        return
    scans = args.scans.split(",")
    if not set(scans) <= {"fast", "reference"}:
        parser.error(f"--scans: expected names among fast,reference, got {args.scans!r}")
    for size in args.sizes.split(","):
        texts = texts_of(args.set)[size]
        per_step: dict[str, list[float]] = {scan: [] for scan in scans}
        for _ in range(args.runs):
            for scan in scans:
                model = load(args.model)
                model.cpu.reference_scan = scan == "reference"
                tune_embedder(model, texts, TuneConfig(steps=1, warmup_steps=0))  # warm-up
                start = time.perf_counter()
                tune_embedder(model, texts, TuneConfig(steps=args.steps, warmup_steps=0))
                per_step[scan].append((time.perf_counter() - start) / args.steps)
        for scan, seconds in per_step.items():
            shown = ", ".join(f"{s:.3f}" for s in seconds)
            print(f"{size} ({scan} scan): seconds per step {shown} (min {min(seconds):.3f})")


def texts_of(path: Path) -> dict[str, list[str]]:
    """The texts of each size: the facts, and the facts joined five by five."""
    short = facts(path)
    return {
        "mcp": short,
        "default": [" ".join(short[i : i + 5]) for i in range(0, len(short) - 4)],
    }


def profile(model_path: Path, texts: dict[str, list[str]], sizes: list[str], steps: int) -> None:
    """Prints the cProfile of ``steps`` tuning steps per size."""
    for size in sizes:
        model = load(model_path)
        profiler = cProfile.Profile()
        profiler.enable()
        tune_embedder(model, texts[size], TuneConfig(steps=steps, warmup_steps=0))
        profiler.disable()
        print(f"== {size}: cProfile of {steps} steps")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
