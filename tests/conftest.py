"""Shared fixtures: the native WebGPU device (wgpu-py on lavapipe or a real GPU)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest


@pytest.fixture(scope="session")
def device() -> Iterator[object]:
    """The native WebGPU device, opened once per test session."""
    from evermind.gpu.native import open_native_device

    dev = open_native_device()
    print(f"adapter: {dev.adapter_info}")
    yield dev


def read_f32(device: object, buf: object, count: int | None = None) -> np.ndarray:
    """Reads ``count`` float32 values of ``buf`` back (synchronously, for tests)."""
    nbytes = None if count is None else 4 * count
    data = asyncio.run(device.read(buf, nbytes))  # type: ignore[attr-defined]
    return np.frombuffer(data, dtype=np.float32).copy()
