"""numpy reference for ``shaders/adamw.wgsl`` (native-only module).

Slow and obvious on purpose: torch ``optim.AdamW``'s update written out in float64, one
formula per line, in torch's order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.floating[Any]]


def adamw_step_ref(
    param: Floats,
    grad: Floats,
    exp_avg: Floats,
    exp_avg_sq: Floats,
    *,
    step: int,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    decay: bool = True,
    clip_scale: float = 1.0,
) -> tuple[Floats, Floats, Floats]:
    """One AdamW step; returns new ``(param, exp_avg, exp_avg_sq)`` in ``param``'s dtype.

    Args:
        param: Parameter values, any shape.
        grad: Gradient, same shape (multiplied by ``clip_scale`` first).
        exp_avg: First moment before the step.
        exp_avg_sq: Second moment before the step.
        step: 1-based step number t.
        lr: Learning rate.
        beta1: First-moment decay.
        beta2: Second-moment decay.
        eps: Added to the bias-corrected RMS.
        weight_decay: Decoupled decay rate, applied only when ``decay``.
        decay: Whether this tensor decays.
        clip_scale: The global-norm clip factor.
    """
    p = param.astype(np.float64)
    g = grad.astype(np.float64) * clip_scale
    m = exp_avg.astype(np.float64)
    v = exp_avg_sq.astype(np.float64)
    if decay:
        p = p * (1.0 - lr * weight_decay)
    m = m + (1.0 - beta1) * (g - m)
    v = v * beta2 + (1.0 - beta2) * g * g
    bias_correction1 = 1.0 - beta1**step
    bias_correction2 = 1.0 - beta2**step
    denom = np.sqrt(v) / np.sqrt(bias_correction2) + eps
    p = p - (lr / bias_correction1) * m / denom
    dtype = param.dtype
    return p.astype(dtype), m.astype(dtype), v.astype(dtype)
