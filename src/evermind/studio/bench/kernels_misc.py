"""Benchmarks of the small kernels: embedding, RMSNorm, conv1d, AdamW and the grad norm.

Each row reports the median wall time of one submit + sync and an effective bandwidth: the
minimum bytes the op must move (every input read once, every output written once) over
that time. Sizes: the nano model's (B 4, L 128, d_model 128, d_inner 256, d_conv 4, vocab
4096, ~1M parameters) and ~16M elements for bandwidth. Benchmarks, not tests: nothing is
checked here.

Browser-safe (standard library and ``evermind`` only); inputs are built with ``array``.
Run natively with ``asyncio.run(bench(await open_device()))``.
"""

from __future__ import annotations

from array import array
from typing import Any

from evermind.gpu import Buffer, Device, Dispatch
from evermind.kernels.adamw import AdamW
from evermind.kernels.conv1d import Conv1d
from evermind.kernels.embedding import Embedding, build_csr
from evermind.kernels.grad_norm import GradNorm
from evermind.kernels.rmsnorm import RMSNorm
from evermind.studio.bench.timing import median_ms

# The nano model (see evermind.model.config; kernels may not import the model package).
NANO = {
    "batch": 4,
    "length": 128,
    "d_model": 128,
    "d_inner": 256,
    "d_state": 16,
    "dt_rank": 8,
    "d_conv": 4,
    "vocab": 4096,
    "n_layer": 4,
}


def _floats(n: int, seed: int = 1) -> array[float]:
    """``n`` floats in [-1, 1): a 4,096-value pseudo-random tile repeated (fast for 16M)."""
    tile_len = min(n, 4096)
    tile = array(
        "f", (((i * 2654435761 + seed * 40503) % 65536) / 32768.0 - 1.0 for i in range(tile_len))
    )
    reps, rest = divmod(n, tile_len) if tile_len else (0, 0)
    return tile * reps + tile[:rest]


def _ids(m: int, vocab: int, seed: int = 7) -> list[int]:
    """Skewed pseudo-random ids (a few frequent tokens, many rare), like text."""
    state, out = seed, []
    for _ in range(m):
        state = (state * 1103515245 + 12345) % (1 << 31)
        u = state / (1 << 31)
        out.append(min(vocab - 1, int(vocab * u * u * u)))
    return out


def _row(kernel: str, shape: str, ms: float, nbytes: int) -> dict[str, Any]:
    return {
        "kernel": kernel,
        "shape": shape,
        "ms": round(ms, 3),
        "gbps": round(nbytes / (ms * 1e-3) / 1e9, 3),
    }


async def _embedding(
    device: Device, m: int, vocab: int, d: int, repeats: int
) -> list[dict[str, Any]]:
    emb = Embedding(device)
    ids = _ids(m, vocab)
    ids_buf, csr_buf = emb.ids_buffer(m), emb.csr_buffer(m)
    emb.write_step(ids_buf, csr_buf, ids, vocab)
    table = device.upload(_floats(vocab * d), label="table")
    out = device.buffer(4 * m * d, label="out")
    grad_table = device.buffer(4 * vocab * d, label="grad_table")
    shape = f"M={m} V={vocab} D={d}"
    fwd_ms = await median_ms(device, [emb.forward(ids_buf, table, out, m, vocab, d)], repeats)
    bwd_ms = await median_ms(device, [emb.backward(csr_buf, out, grad_table, m, vocab, d)], repeats)
    distinct = build_csr(ids, vocab)[0]
    rows = [
        _row("embedding gather", shape, fwd_ms, 4 * m + 8 * m * d),
        _row(
            "embedding scatter-add", shape, bwd_ms, 4 * (3 * m + 2) + 4 * m * d + 8 * distinct * d
        ),
    ]
    device.destroy(ids_buf, csr_buf, table, out, grad_table)
    return rows


async def _rmsnorm(device: Device, m: int, d: int, repeats: int) -> list[dict[str, Any]]:
    norm = RMSNorm(device)
    x, w = device.upload(_floats(m * d), label="x"), device.upload(_floats(d, 2), label="w")
    dy = device.upload(_floats(m * d, 3), label="dy")
    y, dx = device.buffer(4 * m * d, label="y"), device.buffer(4 * m * d, label="dx")
    rstd, dw = device.buffer(4 * m, label="rstd"), device.buffer(4 * d, label="dw")
    fwd = norm.forward(x, w, y, rstd, m, d)
    fwd_ms = await median_ms(device, [fwd], repeats)
    bwd_ms = await median_ms(device, norm.backward(x, w, rstd, dy, dx, dw, m, d), repeats)
    device.destroy(x, w, dy, y, dx, rstd, dw)
    shape = f"M={m} D={d}"
    return [
        _row("rmsnorm fwd", shape, fwd_ms, 8 * m * d),
        _row("rmsnorm bwd (dx, dw)", shape, bwd_ms, 12 * m * d),
    ]


async def _conv1d(
    device: Device, batch: int, length: int, d: int, taps: int, repeats: int
) -> list[dict[str, Any]]:
    conv = Conv1d(device)
    n = batch * length * d
    x, dy = device.upload(_floats(n), label="x"), device.upload(_floats(n, 3), label="dy")
    w, b = device.upload(_floats(d * taps, 2), label="w"), device.upload(_floats(d, 4), label="b")
    y, dx = device.buffer(4 * n, label="y"), device.buffer(4 * n, label="dx")
    dw, db = device.buffer(4 * d * taps, label="dw"), device.buffer(4 * d, label="db")
    dims = (batch, length, d, taps)
    fwd_ms = await median_ms(device, [conv.forward(x, w, b, y, *dims)], repeats)
    bwd_ms = await median_ms(device, conv.backward(x, w, dy, dx, dw, db, *dims), repeats)
    device.destroy(x, dy, w, b, y, dx, dw, db)
    shape = f"B={batch} L={length} D={d} K={taps}"
    return [
        _row("conv1d fwd", shape, fwd_ms, 8 * n),
        _row("conv1d bwd (dx, dw, db)", shape, bwd_ms, 12 * n),
    ]


def nano_parameter_sizes() -> list[tuple[int, bool]]:
    """(floats, decays) of every nano-model tensor in state-dict order (~1M floats)."""
    dm, di, ds, dr, k = (
        NANO[key] for key in ("d_model", "d_inner", "d_state", "dt_rank", "d_conv")
    )
    layer = [
        (dm, False),
        (di * ds, False),
        (di, False),
        (di * k, True),
        (di, False),
        (2 * di * dm, True),
        ((dr + 2 * ds) * di, True),
        (di * dr, True),
        (di, False),
        (dm * di, True),
    ]
    return [(NANO["vocab"] * dm, True), *layer * NANO["n_layer"], (dm, False)]


async def _optimizer(
    device: Device, sizes: list[tuple[int, bool]], label: str, repeats: int
) -> list[dict[str, Any]]:
    opt, gn = AdamW(device), GradNorm(device)
    buffers: list[Buffer] = []
    grads: list[Buffer] = []
    updates: list[Dispatch] = []
    norm, clip = device.buffer(4, label="norm"), device.buffer(4, label="clip")
    for n, decay in sizes:
        p, g = device.upload(_floats(n), label="p"), device.upload(_floats(n, 2), label="g")
        m, v = device.buffer(4 * n, label="m"), device.buffer(4 * n, label="v")
        buffers += [p, g, m, v]
        grads.append(g)
        updates.append(opt.update(p, g, m, v, n, clip, decay))
    total = sum(n for n, _ in sizes)
    norm_ms = await median_ms(device, gn.record(grads, norm, clip, 1.0), repeats)
    adamw_ms = await median_ms(device, updates, repeats)
    device.destroy(*buffers, norm, clip)
    shape = f"{len(sizes)} tensors, {total} floats"
    return [
        _row(f"grad norm + clip {label}", shape, norm_ms, 4 * total),
        _row(f"adamw {label}", shape, adamw_ms, 28 * total),
    ]


async def bench(device: Device, quick: bool = False) -> list[dict[str, Any]]:
    """Times every kernel of this family; returns one row per (kernel, shape).

    Args:
        device: The GPU device.
        quick: Nano sizes only, fewer repeats (skips the 16M-element rows).

    Returns:
        Rows ``{"kernel", "shape", "ms", "gbps"}``; ``gbps`` counts the minimum bytes moved.
    """
    reps = 3 if quick else 5
    tokens = NANO["batch"] * NANO["length"]
    rows = await _embedding(device, tokens, NANO["vocab"], NANO["d_model"], reps)
    rows += await _rmsnorm(device, tokens, NANO["d_model"], reps)
    rows += await _conv1d(
        device, NANO["batch"], NANO["length"], NANO["d_inner"], NANO["d_conv"], reps
    )
    rows += await _optimizer(device, nano_parameter_sizes(), "(nano model)", reps)
    if not quick:
        big = 3
        rows += await _embedding(device, 16384, NANO["vocab"], 1024, big)
        rows += await _rmsnorm(device, 16384, 1024, big)
        rows += await _conv1d(device, 16, 1024, 1024, NANO["d_conv"], big)
        rows += await _optimizer(device, [(1 << 24, True)], "(16M)", big)
    return rows
