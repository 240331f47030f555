"""Benchmarks of the dense kernels: matmul, fused cross-entropy, cosine top-k (browser-safe).

Benchmarks are not tests: they time recorded dispatches on whatever adapter ``device``
wraps and return rows for the CLI / Studio to print. Standard library only, so the same
function runs in Pyodide. Inputs are deterministic (``math.sin`` patterns); their values
do not change the timings of these kernels.
"""

from __future__ import annotations

import logging
import math
from array import array
from typing import Any

from evermind.gpu import Buffer, Device
from evermind.kernels.cross_entropy import CrossEntropy
from evermind.kernels.matmul import Matmul
from evermind.kernels.topk import TopK
from evermind.studio.bench.timing import median_ms

log = logging.getLogger(__name__)

#: Matmul shapes as (label, M, N, K, mode); mode is "NT" (Y = X·Wᵀ), "NN" (dX), "TN" (dW).
MATMUL_SHAPES: list[tuple[str, int, int, int, str]] = [
    ("512³", 512, 512, 512, "NT"),
    ("1024³", 1024, 1024, 1024, "NT"),
    ("in_proj 512x128 · 512x128ᵀ", 512, 512, 128, "NT"),
    ("out_proj 512x256 · 128x256ᵀ", 512, 128, 256, "NT"),
    ("LM head 512x128 · 4096x128ᵀ", 512, 4096, 128, "NT"),
    ("LM head dX 512x4096 · 4096x128", 512, 128, 4096, "NN"),
    ("LM head dW 512x4096ᵀ · 512x128", 4096, 128, 512, "TN"),
]


def _pattern(count: int, phase: float = 0.0, scale: float = 1.0) -> array[float]:
    return array("f", (scale * math.sin(0.37 * i + phase) for i in range(count)))


async def _bench_matmul(device: Device, quick: bool, repeats: int) -> list[dict[str, Any]]:
    mm = Matmul(device)
    rows: list[dict[str, Any]] = []
    for label, m, n, k, mode in MATMUL_SHAPES:
        if quick and m * n * k > 512**3:
            continue
        a = device.upload(_pattern(m * k), label="bench.a")
        b = device.upload(_pattern(n * k, 1.0), label="bench.b")
        c = device.buffer(4 * m * n, label="bench.c")
        step = mm.matmul(a, b, c, m, n, k, trans_a=mode == "TN", trans_b=mode == "NT")
        ms = await median_ms(device, [step], repeats)
        rows.append(
            {
                "kernel": f"matmul {mode}",
                "shape": label,
                "ms": round(ms, 3),
                "gflops": round(2.0 * m * n * k / (ms * 1e6), 3),
            }
        )
        device.destroy(a, b, c)
    return rows


async def _bench_cross_entropy(device: Device, repeats: int) -> dict[str, Any]:
    m, v = 512, 4096
    ce = CrossEntropy(device)
    logits = device.upload(_pattern(m * v, scale=5.0), label="bench.logits")
    targets = device.upload(array("i", ((i * 7919) % v for i in range(m))), label="bench.t")
    row_loss, loss = device.buffer(4 * m), device.buffer(4)
    dlogits = device.buffer(4 * m * v, label="bench.dlogits")
    steps = ce.loss_and_grad(logits, targets, row_loss, dlogits, loss, m, v, 1.0 / m)
    ms = await median_ms(device, steps, repeats)
    device.destroy(logits, targets, row_loss, loss, dlogits)
    moved = 2 * 4 * m * v  # logits read + dlogits written (targets, losses are negligible)
    return {
        "kernel": "softmax cross-entropy fwd+bwd",
        "shape": f"M={m} V={v}",
        "ms": round(ms, 3),
        "gbps": round(moved / (ms * 1e6), 3),
    }


async def _bench_topk(device: Device, n: int, repeats: int) -> dict[str, Any]:
    d, k = 128, 64
    stored: Buffer = device.upload(_pattern(n * d, scale=1.0 / math.sqrt(d / 2)), label="bench.s")
    query = device.upload(_pattern(d, 0.5), label="bench.q")
    scores, index = device.buffer(4 * k), device.buffer(4 * k)
    steps = TopK(device).search(query, stored, scores, index, 1, n, d, k)
    ms = await median_ms(device, steps, repeats)
    device.destroy(stored, query, scores, index)
    return {"kernel": "cosine top-k", "shape": f"N={n} D={d} k={k}", "ms": round(ms, 3)}


async def bench(device: Device, quick: bool = False) -> list[dict[str, Any]]:
    """Times the dense kernels on ``device``.

    Args:
        device: The GPU device.
        quick: Skip the largest shapes (1024³ matmul, top-k over 100k) and repeat less.

    Returns:
        Rows like ``{"kernel": "matmul NT", "shape": "1024³", "ms": 12.3, "gflops": 2.6}``
        (``"gbps"`` for the bandwidth-bound cross-entropy).
    """
    repeats = 2 if quick else 5
    rows = await _bench_matmul(device, quick, repeats)
    rows.append(await _bench_cross_entropy(device, repeats))
    for n in (10_000,) if quick else (10_000, 100_000):
        rows.append(await _bench_topk(device, n, repeats))
    for row in rows:
        log.info("bench_dense: %s", row)
    return rows
