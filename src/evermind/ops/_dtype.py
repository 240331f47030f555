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
