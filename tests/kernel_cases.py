"""Kernel cases that run both natively and in the browser (see evermind.kernels.harness).

Each ``tests/shaders/test_<op>.py`` defines ``browser_cases() -> list[KernelCase]``: a few
small cases with inputs and the reference's expected outputs. ``tests/shaders/
test_cases_native.py`` runs them all through wgpu-py; ``tests/browser/test_kernels_browser.py``
runs the same cases in headless Chromium through Pyodide and ``navigator.gpu``.
"""

from __future__ import annotations

import base64
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.numerics import assert_close


@dataclass
class KernelCase:
    """One launcher call with its inputs and expected outputs.

    ``buffers`` holds every buffer's initial contents (outputs included, usually zeros);
    ``expected`` maps a buffer name to what it must hold afterwards (same dtype as its
    initial contents); ``args`` lists the method's arguments: a buffer name as
    ``{"buf": name}`` or a scalar.
    """

    name: str
    launcher: str
    method: str
    args: list[Any]
    buffers: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    atol: float
    rtol: float
    ctor: dict[str, Any] = field(default_factory=dict)

    def spec(self, *, b64: bool = False) -> dict[str, Any]:
        """The JSON-able spec for :func:`evermind.kernels.harness.run_case`."""

        def enc(a: np.ndarray) -> Any:
            raw = np.ascontiguousarray(a).tobytes()
            return base64.b64encode(raw).decode() if b64 else raw

        return {
            "launcher": self.launcher,
            "ctor": self.ctor,
            "method": self.method,
            "args": self.args,
            "buffers": {k: enc(v) for k, v in self.buffers.items()},
            "read": sorted(self.expected),
        }

    def check(self, outputs: dict[str, bytes]) -> None:
        """Compares raw output bytes with the expected arrays."""
        for name, want in self.expected.items():
            got = np.frombuffer(outputs[name], dtype=want.dtype)[: want.size].reshape(want.shape)
            assert_close(got, want, atol=self.atol, rtol=self.rtol, name=f"{self.name}:{name}")


def all_cases() -> list[KernelCase]:
    """Collects ``browser_cases()`` from every ``tests/shaders/test_*.py``."""
    import tests.shaders as pkg

    cases: list[KernelCase] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"tests.shaders.{info.name}")
        factory = getattr(module, "browser_cases", None)
        if factory is not None:
            cases.extend(factory())
    return cases
