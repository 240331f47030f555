"""Dtype helpers shared by the op modules (native-only: imports numpy)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.floating[Any]]
Ints = npt.NDArray[np.integer[Any]]
F64 = npt.NDArray[np.float64]


def out_dtype(*arrays: Any) -> np.dtype[Any]:
    """The floating dtype a result is returned in: numpy's promotion of the inputs' dtypes.

    Integer-only or Python-scalar inputs give float64.
    """
    dtype = np.result_type(
        *(
            a if isinstance(a, np.ndarray | np.generic | float | int) else np.asarray(a)
            for a in arrays
        )
    )
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def f64(a: Any) -> F64:
    """``a`` as a float64 array (no copy when it already is one)."""
    return np.asarray(a, dtype=np.float64)


def as_compute(a: Any, compute: npt.DTypeLike) -> Floats:
    """``a`` as an array of the arithmetic dtype ``compute`` (no copy when it already is one).

    The references compute in float64 by default (the kernels' oracle); the numpy decoder
    passes its model's float32 for the per-token step, where float32 is what the GPU computes
    too and halves the memory traffic of the (B, D, N) state.
    """
    return np.asarray(a, dtype=compute)
