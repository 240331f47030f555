"""The pure-Python tensor container that crosses the package boundary.

This module owns :class:`Tensor`: a shape plus flat row-major data, either an
``array('f')`` (float32, host byte order) or raw little-endian bytes tagged with their
safetensors dtype (``"F32"`` or ``"F16"``). It deliberately has no maths: the browser has
no numpy, and the package only needs to move, convert and check tensors.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

from evermind.errors import PackageError
from evermind.package.float16 import (
    array_to_float32_le_bytes,
    float16_bytes_to_float32,
    float32_le_bytes_to_array,
    float32_to_float16_bytes,
)

#: Bytes per element of each safetensors dtype the format allows.
DTYPE_SIZES: dict[str, int] = {"F32": 4, "F16": 2}

#: ``torch_dtype`` names (config.json, manifest) of each safetensors dtype.
DTYPE_TO_TORCH: dict[str, str] = {"F32": "float32", "F16": "float16"}
TORCH_TO_DTYPE: dict[str, str] = {value: key for key, value in DTYPE_TO_TORCH.items()}


@dataclass(frozen=True, eq=False)
class Tensor:
    """A dense row-major tensor with pure-Python storage.

    Attributes:
        shape: Dimensions, outermost first, e.g. ``(vocab_size, d_model)``.
        data: ``array('f')`` of ``prod(shape)`` float32 values in host order, or ``bytes``
            holding ``prod(shape)`` little-endian elements of ``dtype``.
        dtype: ``"F32"`` or ``"F16"``: the element type of ``data``. An ``array('f')``
            must be ``"F32"``.

    Raises:
        PackageError: The shape is not a tuple of non-negative ints, the dtype is unknown,
            or the data length does not match the shape.
    """

    shape: tuple[int, ...]
    data: array[float] | bytes
    dtype: str = "F32"

    def __post_init__(self) -> None:
        if not isinstance(self.shape, tuple) or not all(
            isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in self.shape
        ):
            raise PackageError(
                f"Tensor shape {self.shape!r} is invalid; expected a tuple of non-negative ints"
            )
        if self.dtype not in DTYPE_SIZES:
            raise PackageError(
                f"Tensor dtype {self.dtype!r} is not supported; expected one of "
                f"{sorted(DTYPE_SIZES)}"
            )
        if isinstance(self.data, array):
            if self.data.typecode != "f" or self.dtype != "F32":
                raise PackageError(
                    f"Tensor data is array({self.data.typecode!r}) with dtype {self.dtype}; "
                    "expected array('f') with dtype 'F32' (or bytes for 'F16')"
                )
            count = len(self.data)
        elif isinstance(self.data, bytes):
            itemsize = DTYPE_SIZES[self.dtype]
            if len(self.data) % itemsize:
                raise PackageError(
                    f"Tensor has {len(self.data)} bytes of {self.dtype}; expected a multiple "
                    f"of {itemsize}"
                )
            count = len(self.data) // itemsize
        else:
            raise PackageError(
                f"Tensor data is {type(self.data).__name__}; expected array('f') or bytes"
            )
        if count != self.numel:
            raise PackageError(
                f"Tensor of shape {self.shape} needs {self.numel} elements but data holds {count}"
            )

    @property
    def numel(self) -> int:
        """Number of elements (product of the shape; 1 for a scalar)."""
        return math.prod(self.shape)

    def to_float32(self) -> array[float]:
        """Return the values as a new float32 ``array('f')`` (float16 is upcast exactly)."""
        if isinstance(self.data, array):
            return array("f", self.data)
        if self.dtype == "F16":
            return float16_bytes_to_float32(self.data)
        return float32_le_bytes_to_array(self.data)

    def encode(self, dtype: str, *, name: str) -> bytes:
        """Return the little-endian bytes of this tensor stored as `dtype`.

        Args:
            dtype: ``"F32"`` or ``"F16"``; float32 -> float16 rounds to nearest even.
            name: The tensor name, for error messages.

        Returns:
            ``numel * itemsize`` bytes.

        Raises:
            PackageError: `dtype` is unknown, or a value does not fit in float16.
        """
        if dtype not in DTYPE_SIZES:
            raise PackageError(
                f"tensor {name!r}: storage dtype {dtype!r} is not supported; expected one of "
                f"{sorted(DTYPE_SIZES)}"
            )
        if isinstance(self.data, bytes) and self.dtype == dtype:
            return self.data
        if dtype == "F32":
            if isinstance(self.data, array):
                return array_to_float32_le_bytes(self.data)
            return array_to_float32_le_bytes(self.to_float32())
        values = self.data if isinstance(self.data, array) else self.to_float32()
        return float32_to_float16_bytes(values, name=name)
