"""How the device benchmarks time GPU work: the median of submit + sync (browser-safe).

Standard library and ``evermind.gpu`` only, so the same helpers run in the Studio tab
(Pyodide, ``navigator.gpu``) and natively (wgpu-py). Every kernel row, the training step's
breakdown and the model's latencies are timed with these; ``benchmarks/`` (outside the
installed package) builds on them rather than copying them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

from evermind.gpu import Device, Dispatch


def adapter_name(device: Device) -> str:
    """A short human name of the device's adapter (e.g. ``llvmpipe (LLVM 15.0.6, 256 bits)``)."""
    info = device.adapter_info
    return info.get("device") or info.get("description") or info.get("architecture", "") or "?"


async def median_ms(
    device: Device, dispatches: Sequence[Dispatch], repeats: int, warm_up: bool = True
) -> float:
    """Median milliseconds of one submit of ``dispatches`` + sync (after one warm-up run).

    The warm-up pays first-use costs (pipeline caches, page faults); every sample includes
    one submit and one readback round trip.
    """
    if warm_up:
        device.submit(dispatches)
        await device.sync()
    samples = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        device.submit(dispatches)
        await device.sync()
        samples.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(samples)


async def median_call_ms(call: Callable[[], Awaitable[object]], repeats: int) -> float:
    """Median milliseconds of ``await call()``, after one warm-up call."""
    await call()
    samples = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(samples)
