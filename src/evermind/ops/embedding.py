"""numpy reference for ``shaders/embedding.wgsl``: the token gather and its backward (native-only).

Shapes: ids (M,) (any shape, flattened), table (V, D), out (M, D), grad_out (M, D).

    out[m]          = table[ids[m]]   (zeros for an id outside [0, V))
    grad_table[v]  += sum of grad_out[m] over the positions m with ids[m] = v
"""

from __future__ import annotations

import numpy as np

from evermind.ops._dtype import Floats, Ints, f64

__all__ = ["embedding_bwd", "embedding_fwd"]


def embedding_fwd(ids: Ints, table: Floats) -> Floats:
    """Rows of ``table`` (V, D) picked by ``ids`` (M,), in the table's dtype."""
    flat = np.asarray(ids).reshape(-1)
    inside = (flat >= 0) & (flat < table.shape[0])
    out = np.zeros((flat.size, table.shape[1]), dtype=table.dtype)
    out[inside] = table[flat[inside]]
    return out


def embedding_bwd(ids: Ints, grad_out: Floats, grad_table: Floats) -> Floats:
    """``grad_table`` plus, for every token v, the sum of ``grad_out`` rows at v's positions.

    Sums run in float64 in ascending position order (``np.add.at`` is unbuffered and in
    order) and are added to ``grad_table`` once per token, as the kernel does.

    Args:
        ids: Token ids, (M,), each in [0, V).
        grad_out: Upstream gradient, (M, D).
        grad_table: The gradient accumulated so far (e.g. the tied LM head's), (V, D).

    Returns:
        A new array in ``grad_table``'s dtype.
    """
    sums = np.zeros(grad_table.shape)
    np.add.at(sums, np.asarray(ids).reshape(-1), f64(grad_out).reshape(-1, grad_table.shape[1]))
    return (f64(grad_table) + sums).astype(grad_table.dtype)
