"""numpy references for ``shaders/grad_norm.wgsl`` (native-only module).

Two views of the same quantity: :func:`global_norm_ref` and :func:`clip_scale_ref` say what
the kernel writes; :func:`clip_grad_norm_torch_ref` is torch ``nn.utils.clip_grad_norm_``'s
semantics written out in numpy (norm of per-tensor norms, coefficient clamped at 1, gradients
rescaled), so tests can check both agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.floating[Any]]

#: Added to the norm before dividing, as torch does.
NORM_EPS = 1e-6


def global_norm_ref(grads: Sequence[Floats]) -> float:
    """The L2 norm of all gradients together, summed in float64 one tensor at a time."""
    total = 0.0
    for g in grads:
        total += float(np.sum(np.square(g.astype(np.float64))))
    return math.sqrt(total)


def clip_scale_ref(norm: float, max_norm: float) -> float:
    """``min(1, max_norm / (norm + 1e-6))``; 0 when the norm is inf or NaN (the kernel's rule)."""
    if not math.isfinite(norm):
        return 0.0
    return min(1.0, max_norm / (norm + NORM_EPS))


def clip_grad_norm_torch_ref(
    grads: Sequence[Floats], max_norm: float
) -> tuple[float, list[Floats]]:
    """torch ``clip_grad_norm_(params, max_norm)`` (2-norm) in numpy.

    Returns:
        The total norm (before clipping) and the clipped gradients (new arrays). For a
        non-finite norm torch (``error_if_nonfinite=False``) multiplies by 0 (inf norm) or
        NaN (NaN norm); this mirrors torch, while the kernel's factor is 0 in both cases.
    """
    per_tensor = np.array([np.linalg.norm(g.astype(np.float64).ravel()) for g in grads])
    total = float(np.linalg.norm(per_tensor))
    coefficient = float(np.minimum(max_norm / (total + NORM_EPS), 1.0))  # NaN stays NaN
    return total, [(g.astype(np.float64) * coefficient).astype(g.dtype) for g in grads]
