"""The GPU port: one async-first API over WebGPU on both hosts.

``await open_device()`` returns a :class:`Device`; the transport is chosen here, once:
in Pyodide (``sys.platform == "emscripten"``) it is ``navigator.gpu`` (``browser.py``),
natively it is wgpu-py (``native.py``). See ``base.py`` for the API.
"""

from __future__ import annotations

import sys

from evermind.gpu.base import (
    COPY_DST,
    COPY_SRC,
    MAP_READ,
    STORAGE,
    UNIFORM,
    Buffer,
    Device,
    Dispatch,
    Kernel,
    Plan,
    grid_1d,
    pack_params,
)
from evermind.gpu.shaders import load_shader, shader_names

IS_BROWSER = sys.platform == "emscripten"

_device: Device | None = None


async def open_device(*, fresh: bool = False) -> Device:
    """Opens (once) and returns the WebGPU device of this host.

    Args:
        fresh: Open a new device instead of returning the shared one.

    Raises:
        NoAdapterError: This host has no WebGPU adapter; the message says how to get one.
    """
    global _device
    if _device is not None and not fresh:
        return _device
    device: Device
    if IS_BROWSER:
        from evermind.gpu.browser import open_browser_device

        device = await open_browser_device()
    else:
        from evermind.gpu.native import open_native_device

        device = open_native_device()
    if not fresh:
        _device = device
    return device


__all__ = [
    "COPY_DST",
    "COPY_SRC",
    "IS_BROWSER",
    "MAP_READ",
    "STORAGE",
    "UNIFORM",
    "Buffer",
    "Device",
    "Dispatch",
    "Kernel",
    "Plan",
    "grid_1d",
    "load_shader",
    "open_device",
    "pack_params",
    "shader_names",
]
