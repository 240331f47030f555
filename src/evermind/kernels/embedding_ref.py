"""numpy references for ``shaders/embedding.wgsl`` (native-only module).

Slow and obvious on purpose: one position at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.floating[Any]]
Ints = NDArray[np.integer[Any]]


def embedding_fwd_ref(ids: Ints, table: Floats) -> Floats:
    """Rows of ``table`` (V, D) picked by ``ids`` (M,); an id outside [0, V) gives zeros."""
    vocab, d = table.shape
    out = np.zeros((ids.size, d), dtype=table.dtype)
    for position, token in enumerate(ids.reshape(-1)):
        if 0 <= token < vocab:
            out[position] = table[token]
    return out


def embedding_bwd_ref(ids: Ints, grad_out: Floats, grad_table: Floats) -> Floats:
    """``grad_table`` plus, for every token v, the sum of ``grad_out`` rows at v's positions.

    Sums run in float64 in ascending position order and are added to ``grad_table`` once
    per token, as the kernel does. Returns a new array in ``grad_table``'s dtype.

    Args:
        ids: Token ids, (M,), each in [0, V).
        grad_out: Upstream gradient, (M, D).
        grad_table: The gradient accumulated so far (e.g. the tied LM head's), (V, D).
    """
    sums = np.zeros(grad_table.shape)
    for position, token in enumerate(ids.reshape(-1)):
        sums[token] += grad_out[position].astype(np.float64)
    return (grad_table.astype(np.float64) + sums).astype(grad_table.dtype)
