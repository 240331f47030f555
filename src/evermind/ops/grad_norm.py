"""numpy reference for ``shaders/grad_norm.wgsl``: global gradient norm, clip factor (native-only).

Two views of the same quantity: :func:`global_norm` and :func:`clip_scale` say what the
kernel writes (and what the CPU trainer applies); :func:`clip_grad_norm_torch` is torch
``nn.utils.clip_grad_norm_``'s semantics written out (norm of per-tensor norms, coefficient
clamped at 1, gradients rescaled), so tests can check both agree. Gradients: any number of
tensors of any shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from evermind.ops._dtype import Floats, f64

__all__ = ["NORM_EPS", "clip_grad_norm_torch", "clip_scale", "global_norm"]

#: Added to the norm before dividing, as torch does.
NORM_EPS = 1e-6


def global_norm(grads: Sequence[Floats], scale: float = 1.0) -> float:
    """The L2 norm of all gradients together (each multiplied by ``scale``), in float64."""
    total = 0.0
    for g in grads:
        total += float(np.sum(np.square(f64(g) * scale)))
    return math.sqrt(total)


def clip_scale(norm: float, max_norm: float) -> float:
    """``min(1, max_norm / (norm + 1e-6))``; 0 when the norm is inf or NaN (the kernel's rule)."""
    if not math.isfinite(norm):
        return 0.0
    return min(1.0, max_norm / (norm + NORM_EPS))


def clip_grad_norm_torch(grads: Sequence[Floats], max_norm: float) -> tuple[float, list[Floats]]:
    """torch ``clip_grad_norm_(params, max_norm)`` (2-norm) in numpy.

    Returns:
        The total norm (before clipping) and the clipped gradients (new arrays). For a
        non-finite norm torch (``error_if_nonfinite=False``) multiplies by 0 (inf norm) or
        NaN (NaN norm); this mirrors torch, while the kernel's factor is 0 in both cases.
    """
    per_tensor = np.array([np.linalg.norm(f64(g).ravel()) for g in grads])
    total = float(np.linalg.norm(per_tensor))
    coefficient = float(np.minimum(max_norm / (total + NORM_EPS), 1.0))  # NaN stays NaN
    return total, [(f64(g) * coefficient).astype(g.dtype) for g in grads]
