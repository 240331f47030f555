"""Benchmark the cortex (the shared-expert MoE FFN after each mixer) on the numpy CPU backend.

Trains the same small model with and without the cortex on the bytes of this repository's
source (vocab 256: no tokenizer to train), interleaving the two step by step so that both see
the same load, and prints per-step time, the loss, and the cortex's routing every
``--log-every`` steps (per layer each expert's share of the routed (token, slot)
assignments, and the load-balancing loss, whose value is k when routing is perfectly even).

Usage: .venv/bin/python -m benchmarks.cortex [--experts 4] [--top-k 2] [--steps 40]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from array import array
from pathlib import Path

import numpy as np

from evermind.cli.progress import routing_text
from evermind.model import MambaConfig, init_params
from evermind.train.cpu_backend import CpuBackend
from evermind.train.loop import TrainConfig


def source_bytes() -> np.ndarray:
    """This repository's Python source as one byte stream (token ids 0..255)."""
    root = Path(__file__).resolve().parent.parent / "src" / "evermind" / "model"
    data = b"".join(path.read_bytes() for path in sorted(root.glob("*.py")))
    return np.frombuffer(data, np.uint8).astype(np.int32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, default=4, help="routed experts E")
    parser.add_argument("--top-k", type=int, default=2, help="experts per token k")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()

    shape = {"d_model": args.d_model, "n_layer": args.n_layer, "vocab_size": 256}
    cortex = {"moe_experts": args.experts, "moe_top_k": args.top_k}
    train = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=3e-3)
    backends = {}
    for label, config in (
        ("plain", MambaConfig(**shape)),
        ("cortex", MambaConfig(**shape, **cortex)),
    ):
        backends[label] = CpuBackend(config, init_params(config, 0), train)
        print(f"{label}: {config.n_params:,} parameters")
    stream = source_bytes()
    rng = np.random.default_rng(0)
    seconds: dict[str, list[float]] = {label: [] for label in backends}
    losses: dict[str, float] = {}
    window = args.batch_size * (args.seq_len + 1)
    for step in range(1, args.steps + 1):
        start = int(rng.integers(0, stream.size - window))
        rows = stream[start : start + window].reshape(args.batch_size, args.seq_len + 1)
        batch = (array("i", rows[:, :-1].reshape(-1)), array("i", rows[:, 1:].reshape(-1)))
        for label, backend in backends.items():
            begin = time.perf_counter()
            losses[label] = asyncio.run(backend.train_step([batch], 3e-3, step))
            seconds[label].append(time.perf_counter() - begin)
        if step % args.log_every == 0 or step == args.steps:
            stats = backends["cortex"].routing or {}
            lm_loss = stats.get("lm_loss", float("nan"))  # the cortex's loss less aux * coef
            print(
                f"step {step}: LM loss plain {losses['plain']:.3f} cortex {lm_loss:.3f}"
                f"{routing_text(stats)}"
            )
    for label, times in seconds.items():
        print(f"{label}: median step {1000 * float(np.median(times)):.1f} ms")


if __name__ == "__main__":
    main()
