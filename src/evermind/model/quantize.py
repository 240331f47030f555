"""The numpy reference for int8 per-row weights: quantise, dequantise, multiply (native-only).

The one numpy statement of the package's int8 rule (docs/format.md, "int8 weights"): a
2-D weight W (rows, cols) in PyTorch layout (one row per output channel) is stored as

    scale[r] = float32(max_c |W[r, c]| / 127)                  # (rows,) float32
    Q[r, c]  = clip(round_half_even(W[r, c] / scale[r]), -127, 127)   # (rows, cols) int8
    W'[r, c] = Q[r, c] * scale[r]                               # what the model multiplies

with a row of zeros stored as scale 0 and Q 0 (never a division by zero, never a NaN).
The division runs in float64 (the scale widened exactly), so the pure-Python writer in
:mod:`evermind.package.int8` (what the tab runs) gives the same bytes; a unit test holds
them to it. Rounding error per element is at most ``scale[r] / 2``.

:func:`linear_rows` is the product the CPU model runs on such a weight: because the scale
belongs to the output row, ``X · W'ᵀ = (X · Qᵀ) * scale`` exactly in real arithmetic, so the
int8 values are multiplied as they are and the scale is applied to the (M, rows) result,
never to a float copy of the weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from evermind.errors import ShapeError
from evermind.ops._dtype import Floats, Ints
from evermind.ops.embedding import embedding_fwd

__all__ = [
    "QMAX",
    "QuantizedRows",
    "dequantize_rows",
    "embedding_rows",
    "linear_rows",
    "quantize_rows",
]

#: Largest stored magnitude: the scheme is symmetric, so -128 is never produced.
QMAX = 127


@dataclass(frozen=True, eq=False)
class QuantizedRows:
    """A 2-D weight as int8 values and one float32 scale per row.

    Attributes:
        values: Q, shape (rows, cols), int8 in [-127, 127].
        scale: Per-row scale, shape (rows,), float32, each >= 0.

    Raises:
        ShapeError: The arrays' dtypes or shapes do not fit together.
    """

    values: npt.NDArray[np.int8]
    scale: npt.NDArray[np.float32]

    def __post_init__(self) -> None:
        if self.values.dtype != np.int8 or self.values.ndim != 2:
            raise ShapeError(
                f"QuantizedRows: values must be a 2-D int8 array, got {self.values.ndim}-D "
                f"{self.values.dtype}"
            )
        if self.scale.dtype != np.float32 or self.scale.shape != (self.values.shape[0],):
            raise ShapeError(
                f"QuantizedRows: scale has shape {self.scale.shape} dtype {self.scale.dtype}; "
                f"expected ({self.values.shape[0]},) float32, one scale per row"
            )

    @property
    def shape(self) -> tuple[int, ...]:
        """The weight's shape (rows, cols)."""
        return tuple(self.values.shape)

    @property
    def nbytes(self) -> int:
        """Bytes held: the int8 values plus the float32 scales."""
        return int(self.values.nbytes + self.scale.nbytes)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The dequantised float32 weight (a new array), so ``np.asarray(w)`` still works for
        code that wants floats (finiteness checks, the GPU decoder's upload)."""
        out = dequantize_rows(self)
        return out if dtype is None else out.astype(dtype)


def quantize_rows(weight: Floats) -> QuantizedRows:
    """Quantise a 2-D weight row by row (symmetric, int8, one scale per output row).

    Args:
        weight: W, shape (rows, cols), finite floats (PyTorch layout: rows are outputs).

    Returns:
        Q and the per-row scale (see the module docstring).

    Raises:
        ShapeError: ``weight`` is not 2-D or holds NaN or infinity.
    """
    w = np.asarray(weight)
    if w.ndim != 2:
        raise ShapeError(f"quantize_rows: expected a 2-D (rows, cols) weight, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ShapeError("quantize_rows: the weight holds NaN or infinity; expected finite values")
    w64 = w.astype(np.float64)
    scale = (np.abs(w64).max(axis=1, initial=0.0) / QMAX).astype(np.float32)  # (rows,)
    divisor = scale.astype(np.float64)
    safe = np.where(divisor > 0, divisor, 1.0)[:, None]  # zero rows: Q is 0 whatever we divide by
    q = np.clip(np.rint(w64 / safe), -QMAX, QMAX).astype(np.int8)  # (rows, cols)
    return QuantizedRows(q, scale)


def dequantize_rows(weight: QuantizedRows) -> npt.NDArray[np.float32]:
    """W' = Q * scale per row, float32 (the values the int8 model computes with).

    Args:
        weight: From :func:`quantize_rows` or a package's int8 tensor.

    Returns:
        A new (rows, cols) float32 array.
    """
    out: npt.NDArray[np.float32] = weight.values.astype(np.float32) * weight.scale[:, None]
    return out


def linear_rows(x: Floats, weight: Floats | QuantizedRows) -> Floats:
    """``x · Wᵀ`` for a float weight or an int8 one (scale applied to the output rows).

    Args:
        x: Inputs, shape (..., cols).
        weight: W, shape (rows, cols): a float array or :class:`QuantizedRows`.

    Returns:
        Shape (..., rows), in ``x``'s dtype for an int8 weight (numpy's promotion otherwise).
    """
    if isinstance(weight, QuantizedRows):
        # numpy has no int8 x float GEMM: it widens Q to x's dtype inside the product (a
        # transient (rows, cols) buffer) and calls BLAS; the scale costs one (..., rows)
        # multiply, not a (rows, cols) one.
        out: Floats = (x @ weight.values.T.astype(x.dtype)) * weight.scale.astype(x.dtype)
        return out
    result: Floats = x @ weight.T
    return result


def embedding_rows(ids: Ints, table: Floats | QuantizedRows) -> Floats:
    """Rows of ``table`` (V, D) picked by ``ids`` (M,): the gather, for an int8 table too.

    Args:
        ids: Token ids, any shape (flattened), each in [0, V) (others give zero rows).
        table: A float (V, D) table or :class:`QuantizedRows`.

    Returns:
        (M, D) in the table's float dtype (float32 for an int8 table).
    """
    if not isinstance(table, QuantizedRows):
        return embedding_fwd(ids, table)
    flat = np.asarray(ids).reshape(-1)
    inside = (flat >= 0) & (flat < table.values.shape[0])
    out = np.zeros((flat.size, table.values.shape[1]), np.float32)
    picked = flat[inside]
    out[inside] = table.values[picked].astype(np.float32) * table.scale[picked, None]
    return out
