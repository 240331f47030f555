"""Benchmark of the scan family: selective scan forward/backward, the Mamba-2 SSD scan
(chunked forward, backward, decoding step) and the recurrent step.

Browser-safe (standard library and ``evermind`` only): the CLI runs it natively and the Studio
in the tab. Not a test: it measures, it does not check numbers (the tests do). Each row is the
median wall time of a few repeats of ``device.submit(...)`` + ``await device.sync()`` after one
warm-up, so it includes one submit and one readback round trip (reported as the "sync" row).

Native run::

    .venv/bin/python -c "import asyncio; from evermind.gpu.native import open_native_device; \\
from evermind.studio.bench.kernels_scan import bench; \\
[print(r) for r in asyncio.run(bench(open_native_device()))]"
"""

from __future__ import annotations

import math
import random
from array import array
from typing import Any

from evermind.gpu import Buffer, Device
from evermind.kernels.recurrent_step import RecurrentStep
from evermind.kernels.selective_scan import SelectiveScan, states_count
from evermind.kernels.ssd import SSD, chunk_states_count
from evermind.studio.bench.timing import median_ms

#: (B, L, D, N): the issue's benchmark shape and the nano model's training shape.
SCAN_SHAPES = ((4, 256, 256, 16), (4, 128, 256, 16))
#: (B, L, H, P, G, N, chunk) of the SSD scan: the Mamba-2 nano model's training shape (its
#: default 256-step chunk, so one chunk) and the same with 32-step chunks.
SSD_SHAPES = ((4, 128, 4, 64, 1, 16, 256), (4, 128, 4, 64, 1, 16, 32))
#: (B, D, N, d_conv) of the generation step.
STEP_SHAPE = (1, 256, 16, 4)


def _uniform(rng: random.Random, count: int, low: float, high: float) -> array[float]:
    return array("f", (rng.uniform(low, high) for _ in range(count)))


async def _bench_scan(
    device: Device, shape: tuple[int, int, int, int], repeats: int
) -> list[dict[str, Any]]:
    batch, length, dim, n = shape
    rng = random.Random(0)
    tokens, rows = batch * length * dim, batch * length
    up = device.upload
    x, delta, dy = (up(_uniform(rng, tokens, lo, hi)) for lo, hi in ((-1, 1), (-5, 1), (-1, 1)))
    a_log = up(array("f", (math.log(rng.uniform(1.0, 16.0)) for _ in range(dim * n))))
    b_in, c_in = (up(_uniform(rng, rows * n, -1, 1)) for _ in range(2))
    d_skip = up(_uniform(rng, dim, -1, 1))
    y = device.buffer(4 * tokens, label="y")
    states = device.buffer(4 * states_count(batch, length, dim, n), label="states")
    dx, ddelta, da_log, db, dc, dd = (
        device.buffer(4 * count) for count in (tokens, tokens, dim * n, rows * n, rows * n, dim)
    )
    scan = SelectiveScan(device)
    inputs = (x, delta, a_log, b_in, c_in, d_skip)
    fwd_infer = [scan.forward(*inputs, y, batch, length, dim, n)]
    fwd_train = [scan.forward(*inputs, y, batch, length, dim, n, states)]
    bwd = scan.backward(dy, *inputs, states, dx, ddelta, da_log, db, dc, dd, batch, length, dim, n)
    label = f"B{batch} L{length} D{dim} N{n}"
    out = [
        {
            "kernel": "selective scan fwd (inference, no states)",
            "shape": label,
            "ms": await median_ms(device, fwd_infer, repeats),
        },
        {
            "kernel": "selective scan fwd (training, stores h)",
            "shape": label,
            "ms": await median_ms(device, fwd_train, repeats),
        },
        # The backward overwrites the states with dL/dh; its cost does not depend on their
        # values, so it is timed alone on whatever the buffer holds.
        {
            "kernel": "selective scan bwd (5 passes)",
            "shape": label,
            "ms": await median_ms(device, bwd, repeats),
        },
        {
            "kernel": "selective scan fwd+bwd",
            "shape": label,
            "ms": await median_ms(device, fwd_train + bwd, repeats),
        },
    ]
    for dispatch in bwd:
        out.append(
            {
                "kernel": f"selective scan {dispatch.label}",
                "shape": label,
                "ms": await median_ms(device, [dispatch], repeats),
            }
        )
    device.destroy(x, delta, dy, a_log, b_in, c_in, d_skip, y, states)
    device.destroy(dx, ddelta, da_log, db, dc, dd)
    return out


async def _bench_ssd(
    device: Device, shape: tuple[int, int, int, int, int, int, int], repeats: int
) -> list[dict[str, Any]]:
    batch, length, heads, head_dim, groups, n, chunk = shape
    rng = random.Random(2)
    lanes, steps, rows = batch * length * heads * head_dim, batch * length * heads, batch * length
    up = device.upload
    x, dy = (up(_uniform(rng, lanes, -1, 1)) for _ in range(2))
    dt_raw = up(_uniform(rng, steps, -4, 1))
    a_log = up(array("f", (math.log(rng.uniform(1.0, 16.0)) for _ in range(heads))))
    b_in, c_in = (up(_uniform(rng, rows * groups * n, -1, 1)) for _ in range(2))
    d_skip, dt_bias = (up(_uniform(rng, heads, -1, 0.5)) for _ in range(2))
    y, dt = device.buffer(4 * lanes), device.buffer(4 * steps)
    sizes = (batch, length, heads, head_dim, groups, n)
    chunk_states = device.buffer(4 * chunk_states_count(*sizes[:4], n, chunk))
    grads = [
        device.buffer(4 * count)
        for count in (lanes, steps, heads, rows * groups * n, rows * groups * n, heads, heads)
    ]
    scan = SSD(device)
    inputs = (x, dt_raw, a_log, b_in, c_in, d_skip, dt_bias)
    fwd = scan.forward(*inputs, y, dt, chunk_states, sizes, chunk)
    dx, ddt, da_log, db, dc, dd, ddt_bias = grads
    bwd = scan.backward(
        dy, *inputs, dt, chunk_states, dx, ddt, da_log, db, dc, dd, ddt_bias, sizes, chunk
    )
    state = device.buffer(4 * batch * heads * head_dim * n)
    decode = scan.decode_step(
        state, x, dt_raw, a_log, b_in, c_in, d_skip, dt_bias, y, (batch, heads, head_dim, groups, n)
    )
    label = f"B{batch} L{length} H{heads} P{head_dim} G{groups} N{n} Q{chunk}"
    decode_label = f"B{batch} H{heads} P{head_dim} N{n}"
    out = []
    for kernel, dispatches, shape_label in (
        ("ssd fwd (chunked, 4 passes)", fwd, label),
        ("ssd bwd (8 passes)", bwd, label),
        ("ssd fwd+bwd", fwd + bwd, label),
        ("ssd decode_step", decode, decode_label),
    ):
        ms = await median_ms(device, dispatches, repeats)
        out.append({"kernel": kernel, "shape": shape_label, "ms": ms})
    device.destroy(x, dy, dt_raw, a_log, b_in, c_in, d_skip, dt_bias, y, dt, chunk_states, state)
    device.destroy(*grads)
    return out


async def _bench_step(device: Device, repeats: int) -> list[dict[str, Any]]:
    batch, dim, n, d_conv = STEP_SHAPE
    rng = random.Random(1)
    channels = batch * dim
    up = device.upload
    bufs: dict[str, Buffer] = {
        "conv_state": device.buffer(4 * channels * d_conv),
        "h": device.buffer(4 * channels * n),
        "x": up(_uniform(rng, channels, -1, 1)),
        "weight": up(_uniform(rng, dim * d_conv, -0.5, 0.5)),
        "bias": up(_uniform(rng, dim, -0.5, 0.5)),
        "x_c": device.buffer(4 * channels),
        "delta": up(_uniform(rng, channels, -5, 1)),
        "a_log": up(array("f", (math.log(rng.uniform(1.0, 16.0)) for _ in range(dim * n)))),
        "b_t": up(_uniform(rng, batch * n, -1, 1)),
        "c_t": up(_uniform(rng, batch * n, -1, 1)),
        "d": up(_uniform(rng, dim, -1, 1)),
        "y": device.buffer(4 * channels),
    }
    b = bufs
    step = RecurrentStep(device)
    conv = step.conv_step(
        b["conv_state"], b["x"], b["weight"], b["bias"], b["x_c"], batch, dim, d_conv
    )
    ssm = step.ssm_step(
        b["h"], b["x_c"], b["delta"], b["a_log"], b["b_t"], b["c_t"], b["d"], b["y"], batch, dim, n
    )
    label = f"B{batch} D{dim} N{n} K{d_conv}"
    rows = [
        {
            "kernel": "recurrent conv_step",
            "shape": label,
            "ms": await median_ms(device, [conv], repeats),
        },
        {
            "kernel": "recurrent ssm_step",
            "shape": label,
            "ms": await median_ms(device, [ssm], repeats),
        },
        {
            "kernel": "recurrent conv_step+ssm_step",
            "shape": label,
            "ms": await median_ms(device, [conv, ssm], repeats),
        },
        {
            "kernel": "sync (empty submit + readback)",
            "shape": "-",
            "ms": await median_ms(device, [], repeats),
        },
    ]
    device.destroy(*bufs.values())
    return rows


async def bench(device: Device, quick: bool = False) -> list[dict[str, Any]]:
    """Times the scan kernels; returns rows ``{"kernel", "shape", "ms"}``.

    Args:
        device: The GPU device.
        quick: Only the nano training shape, with fewer repeats.
    """
    repeats = 3 if quick else 7
    shapes = SCAN_SHAPES[1:] if quick else SCAN_SHAPES
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        rows.extend(await _bench_scan(device, shape, repeats))
    for ssd_shape in SSD_SHAPES[:1] if quick else SSD_SHAPES:
        rows.extend(await _bench_ssd(device, ssd_shape, repeats))
    rows.extend(await _bench_step(device, repeats * 3))
    for row in rows:
        row["ms"] = round(row["ms"], 3)
    return rows
