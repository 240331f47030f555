"""Launchers for ``shaders/elementwise.wgsl``: add, mul, SiLU, softplus and their backwards.

Each method records one dispatch over ``n`` flat float32 values and returns it; add it to a
:class:`evermind.gpu.Plan` or submit it directly.
The numpy reference is ``evermind.ops.elementwise``.
"""

from __future__ import annotations

from evermind.gpu import Buffer, Device, Dispatch, grid_1d, pack_params
from evermind.kernels._launch import need_f32

SHADER = "elementwise"
#: Invocations per workgroup (the WGSL ``override WG``); 256 is the default WebGPU maximum.
WORKGROUP_SIZE = 256

# Binding slots of elementwise.wgsl.
_X, _Y, _G, _OUT, _OUT2, _PARAMS = range(6)


class Elementwise:
    """Records elementwise dispatches on one device.

    Args:
        device: The GPU device.
        workgroup_size: Override for ``WG`` (must divide nothing; any value 1..256).
    """

    def __init__(self, device: Device, workgroup_size: int = WORKGROUP_SIZE) -> None:
        self.device = device
        self.workgroup_size = workgroup_size

    def _record(
        self, entry: str, n: int, bindings: dict[int, Buffer], alpha: float = 0.0
    ) -> Dispatch:
        for slot, buf in bindings.items():
            need_f32(f"elementwise.{entry}", f"binding {slot}", buf, n)
        params = self.device.uniform(
            pack_params(("u32", n), ("f32", alpha)), label=f"{entry}.params"
        )
        kernel = self.device.kernel(SHADER, entry, {"WG": self.workgroup_size})
        return self.device.dispatch(
            kernel, {**bindings, _PARAMS: params}, grid_1d(n, self.workgroup_size), label=entry
        )

    def add(self, x: Buffer, y: Buffer, out: Buffer, n: int) -> Dispatch:
        """``out = x + y``."""
        return self._record("add", n, {_X: x, _Y: y, _OUT: out})

    def mul(self, x: Buffer, y: Buffer, out: Buffer, n: int) -> Dispatch:
        """``out = x * y``."""
        return self._record("mul", n, {_X: x, _Y: y, _OUT: out})

    def mul_bwd(
        self, x: Buffer, y: Buffer, grad: Buffer, dx: Buffer, dy: Buffer, n: int
    ) -> Dispatch:
        """Gradients of ``x * y``: ``dx = grad * y``, ``dy = grad * x``."""
        return self._record("mul_bwd", n, {_X: x, _Y: y, _G: grad, _OUT: dx, _OUT2: dy})

    def accumulate(self, x: Buffer, out: Buffer, n: int) -> Dispatch:
        """``out += x``."""
        return self._record("accumulate", n, {_X: x, _OUT: out})

    def scale(self, x: Buffer, out: Buffer, n: int, alpha: float) -> Dispatch:
        """``out = alpha * x``."""
        return self._record("scale", n, {_X: x, _OUT: out}, alpha)

    def fill(self, out: Buffer, n: int, value: float = 0.0) -> Dispatch:
        """``out = value`` (e.g. zeroing gradients before accumulation)."""
        return self._record("fill", n, {_OUT: out}, value)

    def silu_fwd(self, x: Buffer, out: Buffer, n: int) -> Dispatch:
        """``out = x * sigmoid(x)``."""
        return self._record("silu_fwd", n, {_X: x, _OUT: out})

    def silu_bwd(self, x: Buffer, grad: Buffer, dx: Buffer, n: int) -> Dispatch:
        """``dx = grad * d silu(x) / dx``."""
        return self._record("silu_bwd", n, {_X: x, _G: grad, _OUT: dx})

    def softplus_fwd(self, x: Buffer, out: Buffer, n: int) -> Dispatch:
        """``out = softplus(x)`` (identity past 20, as torch)."""
        return self._record("softplus_fwd", n, {_X: x, _OUT: out})

    def softplus_bwd(self, x: Buffer, grad: Buffer, dx: Buffer, n: int) -> Dispatch:
        """``dx = grad * sigmoid(x)``."""
        return self._record("softplus_bwd", n, {_X: x, _G: grad, _OUT: dx})
