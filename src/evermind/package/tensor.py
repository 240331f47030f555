"""The pure-Python tensor container that crosses the package boundary.

This module owns :class:`Tensor`: a shape plus flat row-major data, either an
``array('f')`` (float32, host byte order) or raw little-endian bytes tagged with their
safetensors dtype (``"F32"``, ``"F16"`` or ``"I8"``; an int8 weight carries its per-row
float32 ``scale``, see :mod:`evermind.package.int8`). It deliberately has no maths beyond
conversion: the browser has no numpy, and the package only needs to move, convert and
check tensors.
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
from evermind.package.int8 import dequantize_row_values

#: Bytes per element of each safetensors dtype the format allows.
DTYPE_SIZES: dict[str, int] = {"F32": 4, "F16": 2, "I8": 1}

#: ``torch_dtype`` names (config.json, manifest) of the float safetensors dtypes; an int8
#: package (manifest dtype ``int8``) stores its unquantised tensors as ``F32``.
DTYPE_TO_TORCH: dict[str, str] = {"F32": "float32", "F16": "float16"}
TORCH_TO_DTYPE: dict[str, str] = {value: key for key, value in DTYPE_TO_TORCH.items()}


@dataclass(frozen=True, eq=False)
class Tensor:
    """A dense row-major tensor with pure-Python storage.

    Attributes:
        shape: Dimensions, outermost first, e.g. ``(vocab_size, d_model)``.
        data: ``array('f')`` of ``prod(shape)`` float32 values in host order, or ``bytes``
            holding ``prod(shape)`` little-endian elements of ``dtype``.
        dtype: ``"F32"``, ``"F16"`` or ``"I8"``: the element type of ``data``. An
            ``array('f')`` must be ``"F32"``.
        scale: For an ``"I8"`` weight of shape (rows, cols): its (rows,) float32 per-row
            scales (value = int8 * scale); None otherwise (an ``"I8"`` tensor without its
            scale can be moved but not converted to floats).

    Raises:
        PackageError: The shape is not a tuple of non-negative ints, the dtype is unknown,
            the data length does not match the shape, or a scale does not fit the rows.
    """

    shape: tuple[int, ...]
    data: array[float] | bytes
    dtype: str = "F32"
    scale: Tensor | None = None

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
        if self.scale is not None:
            self._check_scale(self.scale)

    def _check_scale(self, scale: Tensor) -> None:
        """Require a per-row scale to be (rows,) float32 of an int8 2-D tensor, finite, >= 0."""
        if self.dtype != "I8" or len(self.shape) != 2:
            raise PackageError(
                f"Tensor of shape {self.shape} dtype {self.dtype} has a scale; only a 2-D "
                "I8 tensor carries per-row scales"
            )
        if scale.shape != (self.shape[0],) or scale.dtype != "F32":
            raise PackageError(
                f"int8 tensor of shape {self.shape} has a scale of shape {scale.shape} "
                f"({scale.dtype}); expected ({self.shape[0]},) F32, one scale per row"
            )
        if not all(math.isfinite(v) and v >= 0 for v in scale.to_float32()):
            raise PackageError(
                f"int8 tensor of shape {self.shape}: its scales must be finite and >= 0"
            )

    @property
    def numel(self) -> int:
        """Number of elements (product of the shape; 1 for a scalar)."""
        return math.prod(self.shape)

    def to_float32(self) -> array[float]:
        """Return the values as a new float32 ``array('f')`` (float16 is upcast exactly, int8
        dequantised: int8 * its row's scale).

        Raises:
            PackageError: An ``"I8"`` tensor has no scale.
        """
        if isinstance(self.data, array):
            return array("f", self.data)
        if self.dtype == "I8":
            if self.scale is None:
                raise PackageError(
                    f"int8 tensor of shape {self.shape} has no per-row scale; it cannot be "
                    "read as floats. Hint: only an int8 package's listed weights are I8"
                )
            return dequantize_row_values(self.data, self.scale.to_float32(), self.shape[1])
        if self.dtype == "F16":
            return float16_bytes_to_float32(self.data)
        return float32_le_bytes_to_array(self.data)

    def encode(self, dtype: str, *, name: str) -> bytes:
        """Return the little-endian bytes of this tensor stored as `dtype`.

        Args:
            dtype: ``"F32"``, ``"F16"`` or ``"I8"``; float32 -> float16 rounds to nearest
                even; ``"I8"`` only for a tensor that already is int8 (quantising is
                :func:`evermind.package.int8.quantize_row_values`, which makes the scales).
            name: The tensor name, for error messages.

        Returns:
            ``numel * itemsize`` bytes.

        Raises:
            PackageError: `dtype` is unknown, a value does not fit in float16, or a float
                tensor is asked for as ``"I8"``.
        """
        if dtype not in DTYPE_SIZES:
            raise PackageError(
                f"tensor {name!r}: storage dtype {dtype!r} is not supported; expected one of "
                f"{sorted(DTYPE_SIZES)}"
            )
        if isinstance(self.data, bytes) and self.dtype == dtype:
            return self.data
        if dtype == "I8":
            raise PackageError(
                f"tensor {name!r}: a {self.dtype} tensor cannot be stored as I8 directly; "
                "hint: quantise it first (evermind.package.int8.quantize_row_values)"
            )
        if dtype == "F32":
            if isinstance(self.data, array):
                return array_to_float32_le_bytes(self.data)
            return array_to_float32_le_bytes(self.to_float32())
        values = self.data if isinstance(self.data, array) else self.to_float32()
        return float32_to_float16_bytes(values, name=name)
