"""Runs one kernel case described as plain data, on any host (browser-safe).

The browser test cannot compare against numpy inside Pyodide, so it ships each case's
inputs to the tab, runs the launcher there through ``navigator.gpu`` and brings the raw
output bytes back for the native side to compare. The same function runs natively too,
which is how the cases themselves are checked.

A case spec is a JSON-able dict::

    {"launcher": "evermind.kernels.elementwise:Elementwise",  # module:class
     "ctor": {},                                               # extra constructor kwargs
     "method": "silu_fwd",
     "args": [{"buf": "x"}, {"buf": "out"}, 997],              # buffers by name, or scalars
     "buffers": {"x": <bytes>, "out": <bytes>},                # initial contents
     "read": ["out"]}                                          # what to read back
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from evermind.errors import ConfigError
from evermind.gpu import Buffer, Device, Dispatch


def _resolve(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name.startswith("evermind.kernels.") or not attr:
        raise ConfigError(
            f"kernel case launcher {path!r}: expected 'evermind.kernels.<module>:<Class>'"
        )
    return getattr(importlib.import_module(module_name), attr)


async def run_case(device: Device, spec: Mapping[str, Any]) -> dict[str, bytes]:
    """Runs the case on ``device`` and returns the bytes of every buffer named in ``read``."""
    buffers: dict[str, Buffer] = {
        name: device.upload(data, label=name) for name, data in spec["buffers"].items()
    }
    launcher = _resolve(spec["launcher"])(device, **spec.get("ctor", {}))
    args = [buffers[a["buf"]] if isinstance(a, Mapping) else a for a in spec["args"]]
    recorded = getattr(launcher, spec["method"])(*args)
    dispatches: list[Dispatch] = [recorded] if isinstance(recorded, Dispatch) else list(recorded)
    device.submit(dispatches)
    out = {name: await device.read(buffers[name]) for name in spec["read"]}
    device.destroy(*buffers.values())
    return out
