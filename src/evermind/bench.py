"""Kernel benchmarks: runs every ``evermind.kernels.bench_*`` module on a device.

Browser-safe: the same function runs natively (wgpu-py) and in the tab (the Studio's
``bench_kernels`` call), so one CLI run can print both transports side by side.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import evermind.kernels
from evermind import gpu


def bench_modules() -> list[str]:
    """Names of the kernel benchmark modules, sorted."""
    return sorted(
        f"evermind.kernels.{m.name}"
        for m in pkgutil.iter_modules(evermind.kernels.__path__)
        if m.name.startswith("bench_")
    )


async def run_kernel_bench(
    quick: bool = False, device: gpu.Device | None = None
) -> list[dict[str, Any]]:
    """Runs every kernel benchmark; each row gains ``transport`` and ``adapter`` fields."""
    dev = device or await gpu.open_device()
    adapter = dev.adapter_info.get("device") or dev.adapter_info.get("architecture", "")
    rows: list[dict[str, Any]] = []
    for name in bench_modules():
        module = importlib.import_module(name)
        for row in await module.bench(dev, quick=quick):
            rows.append({"transport": dev.transport, "adapter": adapter, **row})
    return rows
