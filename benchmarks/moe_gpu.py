"""Time the cortex's WebGPU kernels (kernels/moe.py) and a GpuBackend step with and without it.

On wgpu-py (lavapipe here; a real GPU where there is one): the MoE forward, the pooled aux
loss and the backward at one nano-ish shape (M = B·L rows of d_model D, E experts of width F,
k per row, a shared expert of width S), then whole training steps of the nano model with and
without the cortex. Medians of ``--repeats`` runs after one warm-up, each ended by a read of
one float (the GPU work is done when it returns).

Usage: .venv/bin/python -m benchmarks.moe_gpu [--rows 512] [--experts 4] [--top-k 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from array import array
from collections.abc import Callable, Iterator

import numpy as np

from evermind.gpu.native import open_native_device
from evermind.kernels.moe import (
    Moe,
    MoeActivations,
    MoeRouting,
    MoeScratch,
    MoeSizes,
    MoeWeightBuffers,
    weight_counts,
)
from evermind.model import MambaConfig, init_params
from evermind.train.gpu_backend import GpuBackend
from evermind.train.loop import TrainConfig


def _median_ms(run: Callable[[], None], repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512, help="M = B·L")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps-batch", type=int, default=4, help="B of the model steps")
    parser.add_argument("--steps-seq", type=int, default=128, help="L of the model steps")
    args = parser.parse_args()
    dev = open_native_device()
    print(f"adapter: {dev.adapter_info}")
    d = args.d_model
    s = MoeSizes(args.rows, d, args.experts, d, 2 * d, args.top_k)
    rng = np.random.default_rng(0)

    def upload(count: int, name: str) -> object:
        return dev.upload((rng.standard_normal(count) * 0.1).astype(np.float32), label=name)

    w = MoeWeightBuffers(**{n: upload(c, n) for n, c in weight_counts(s).items()})
    g = MoeWeightBuffers(
        **{n: dev.buffer(4 * c, label=f"d{n}") for n, c in weight_counts(s).items()}
    )
    x, dy = upload(s.rows * d, "x"), upload(s.rows * d, "dy")
    y, dx = dev.buffer(4 * s.rows * d, label="y"), dev.buffer(4 * s.rows * d, label="dx")
    act, routing = MoeActivations.allocate(dev, s), MoeRouting.allocate(dev, s)
    scratch = MoeScratch.allocate(dev, s)
    moe = Moe(dev)
    fwd = moe.forward(x, w, act, routing, y, s)
    aux = moe.aux(routing, s, 0.01)
    bwd = moe.backward(dy, x, w, g, act, routing, scratch, dx, s)

    def timed(dispatches: list) -> float:
        def run() -> None:
            dev.submit(dispatches)
            asyncio.run(dev.read(y, 4))

        return _median_ms(run, args.repeats)

    dev.submit(fwd + aux)
    print(f"moe M={s.rows} D={d} E={s.experts} F={s.inner} S={s.shared} k={s.top_k}:")
    print(f"  forward  {timed(fwd):8.1f} ms ({len(fwd)} dispatches)")
    print(f"  aux      {timed(aux):8.1f} ms")
    print(f"  backward {timed(bwd):8.1f} ms ({len(bwd)} dispatches)")
    # Each dispatch alone (what the routed experts cost beside the shared expert's matmuls).
    for dispatch in fwd + bwd:
        print(f"    {dispatch.label:28s} {timed([dispatch]):8.1f} ms")

    b, length = args.steps_batch, args.steps_seq
    train = TrainConfig(steps=10, batch_size=b, seq_len=length, lr=3e-3)
    ids = array("i", rng.integers(0, 256, b * length).tolist())
    for label, extra in (("plain", {}), ("cortex", {"moe_experts": args.experts})):
        cfg = MambaConfig(d_model=d, n_layer=4, vocab_size=256, moe_top_k=args.top_k, **extra)
        backend = GpuBackend(dev, cfg, b, length, train)
        backend.model.load_params(init_params(cfg, 0))
        steps = iter(range(1, 1 << 30))

        def run(backend: GpuBackend = backend, steps: Iterator[int] = steps) -> None:
            asyncio.run(backend.train_step([(ids, ids)], 3e-3, next(steps)))

        print(
            f"  step {label:6s} {_median_ms(run, args.repeats):8.1f} ms ({cfg.n_params:,} params)"
        )


if __name__ == "__main__":
    main()
