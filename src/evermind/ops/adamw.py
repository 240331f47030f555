"""numpy reference for ``shaders/adamw.wgsl``: one AdamW step (native-only).

torch ``optim.AdamW``'s update written out in float64, one formula per line, in torch's
order; the CPU trainer and the contrastive tuner (``weight_decay=0``: plain Adam) run it,
the GPU kernel is tested against it. Tensors of any shape; results in ``param``'s dtype::

    p  = p * (1 - lr * weight_decay)                  (decayed tensors only)
    m  = m + (1 - beta1) * (g - m)
    v  = v * beta2 + (1 - beta2) * g^2
    p  = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
"""

from __future__ import annotations

import numpy as np

from evermind.ops._dtype import Floats, f64

__all__ = ["adamw_step"]


def adamw_step(
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
        clip_scale: The global-norm clip factor (and any gradient scale, e.g. 1 / micro-batches).
    """
    p = f64(param)
    g = f64(grad) * clip_scale
    m = f64(exp_avg)
    v = f64(exp_avg_sq)
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
