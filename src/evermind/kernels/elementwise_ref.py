"""numpy references for ``shaders/elementwise.wgsl`` (native-only module).

Slow and obvious on purpose: these define what the kernels must compute.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]


def sigmoid_ref(x: F32) -> F32:
    """Logistic function, computed in float64 (as tanh, which cannot overflow)."""
    return (0.5 * (1.0 + np.tanh(0.5 * x.astype(np.float64)))).astype(np.float32)


def silu_fwd_ref(x: F32) -> F32:
    """``x * sigmoid(x)``."""
    x64 = x.astype(np.float64)
    return (x64 * 0.5 * (1.0 + np.tanh(0.5 * x64))).astype(np.float32)


def silu_bwd_ref(x: F32, grad: F32) -> F32:
    """Gradient of SiLU: ``grad * s * (1 + x (1 - s))`` with ``s = sigmoid(x)``."""
    x64 = x.astype(np.float64)
    s = 0.5 * (1.0 + np.tanh(0.5 * x64))
    return (grad * s * (1.0 + x64 * (1.0 - s))).astype(np.float32)


def softplus_fwd_ref(x: F32) -> F32:
    """``log(1 + exp(x))``, identity past 20 (torch's threshold)."""
    x64 = x.astype(np.float64)
    return np.where(x64 > 20.0, x64, np.logaddexp(0.0, x64)).astype(np.float32)


def softplus_bwd_ref(x: F32, grad: F32) -> F32:
    """Gradient of softplus: ``grad * sigmoid(x)``."""
    return (grad * sigmoid_ref(x)).astype(np.float32)


def mul_bwd_ref(x: F32, y: F32, grad: F32) -> tuple[F32, F32]:
    """Gradients of ``x * y`` with respect to ``x`` and ``y``."""
    return (grad * y).astype(np.float32), (grad * x).astype(np.float32)
