"""numpy reference for ``shaders/elementwise.wgsl``: SiLU, softplus, sigmoid, product (native-only).

Pointwise, any shape; computed in float64 (or the ``compute`` dtype a caller gives: the numpy
decoder's float32 step, the CPU model's float32 training) and returned in the input's
floating dtype.
Argument order is the kernel's: the forward input first, the upstream gradient last.

    sigmoid(x)     = 1 / (1 + exp(-x)), written 0.5 (1 + tanh(x / 2)): no overflow for any x
    silu(x)        = x * sigmoid(x)
    softplus(x)    = log(1 + exp(x)), the identity past 20 (torch's threshold, as the kernels)
    d(x * y)       = (grad * y, grad * x)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evermind.ops._dtype import Floats, as_compute, f64, out_dtype

__all__ = [
    "SOFTPLUS_THRESHOLD",
    "mul_bwd",
    "sigmoid",
    "silu_bwd",
    "silu_fwd",
    "softplus_bwd",
    "softplus_fwd",
]

#: torch.nn.functional.softplus's default threshold: past it softplus is the identity.
SOFTPLUS_THRESHOLD = 20.0


def _sigmoid64(x: Floats, compute: npt.DTypeLike = np.float64) -> Floats:
    x_c = as_compute(x, compute)
    half = x_c.dtype.type(0.5)
    return half * (1 + np.tanh(half * x_c))


def sigmoid(x: Floats) -> Floats:
    """Logistic function of ``x`` (any shape)."""
    return _sigmoid64(x).astype(out_dtype(x))


def silu_fwd(x: Floats, compute: npt.DTypeLike = np.float64) -> Floats:
    """SiLU (swish) ``x * sigmoid(x)``, computed in ``compute``."""
    return (as_compute(x, compute) * _sigmoid64(x, compute)).astype(out_dtype(x), copy=False)


def silu_bwd(x: Floats, grad: Floats, compute: npt.DTypeLike = np.float64) -> Floats:
    """Gradient of SiLU: ``grad * s * (1 + x (1 - s))`` with ``s = sigmoid(x)``, in ``compute``."""
    x_c, s = as_compute(x, compute), _sigmoid64(x, compute)
    one = s.dtype.type(1)
    out = as_compute(grad, compute) * s
    out *= one + x_c * (one - s)
    return out.astype(out_dtype(x, grad), copy=False)


def softplus_fwd(x: Floats, compute: npt.DTypeLike = np.float64) -> Floats:
    """``log(1 + exp(x))`` without overflow, the identity past :data:`SOFTPLUS_THRESHOLD`."""
    x_c = as_compute(x, compute)
    # log1p(exp(x)) below the threshold (exp cannot overflow there; np.logaddexp computes the
    # same to an ulp but is ~10x slower in float32, the decoder's step).
    soft = np.log1p(np.exp(np.minimum(x_c, SOFTPLUS_THRESHOLD)))
    return np.where(x_c > SOFTPLUS_THRESHOLD, x_c, soft).astype(out_dtype(x), copy=False)


def softplus_bwd(x: Floats, grad: Floats, compute: npt.DTypeLike = np.float64) -> Floats:
    """Gradient of softplus: ``grad * sigmoid(x)``, exactly ``grad`` past the threshold; in
    ``compute``."""
    x_c = as_compute(x, compute)
    slope = np.where(x_c > SOFTPLUS_THRESHOLD, x_c.dtype.type(1), _sigmoid64(x_c, compute))
    return (as_compute(grad, compute) * slope).astype(out_dtype(x, grad), copy=False)


def mul_bwd(x: Floats, y: Floats, grad: Floats) -> tuple[Floats, Floats]:
    """Gradients of ``x * y`` with respect to ``x`` and ``y``."""
    dtype = out_dtype(x, y, grad)
    return (f64(grad) * f64(y)).astype(dtype), (f64(grad) * f64(x)).astype(dtype)
