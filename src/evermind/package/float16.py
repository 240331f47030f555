"""Float32 <-> float16 conversion in pure Python for package tensors.

This module owns the numeric rule of half-precision packages: float32 values are rounded to
IEEE 754 binary16 with round-to-nearest, ties-to-even (what :mod:`struct`'s ``'e'`` format
does), subnormal halves are produced and read exactly, and a value outside the float16
range (``|x| >= 65520`` rounds to infinity), an infinity or a NaN is an error rather than a
silent ``inf``. Reading upcasts float16 to float32 exactly (every half is a float32).

Byte order is little-endian on disk, whatever the host's order.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections.abc import Sequence

from evermind.errors import PackageError

#: Largest finite float16 value; anything that rounds beyond it is refused.
FLOAT16_MAX = 65504.0

_LITTLE_ENDIAN_HOST = sys.byteorder == "little"


def _first_bad_index(values: Sequence[float]) -> int:
    """Return the index of the first value that cannot be stored as a finite float16."""
    for index, value in enumerate(values):
        if not math.isfinite(value):
            return index
        try:
            struct.pack("<e", value)
        except OverflowError:
            return index
    return -1


def float32_to_float16_bytes(values: Sequence[float], *, name: str) -> bytes:
    """Round float values to little-endian float16 bytes (round-to-nearest-even).

    Args:
        values: The values, usually an ``array('f')`` of one tensor, in row-major order.
        name: The tensor name, used in error messages.

    Returns:
        ``2 * len(values)`` bytes of little-endian IEEE 754 binary16.

    Raises:
        PackageError: A value is NaN, infinite, or rounds beyond the float16 range
            (``|x| >= 65520``); the message names the tensor, the flat index and the value.
    """
    count = len(values)
    bad = -1
    if not all(map(math.isfinite, values)):
        bad = _first_bad_index(values)
    else:
        try:
            return struct.pack(f"<{count}e", *values)
        except OverflowError:
            bad = _first_bad_index(values)
    value = values[bad]
    raise PackageError(
        f"tensor {name!r}: value {value!r} at flat index {bad} cannot be stored as float16; "
        f"expected finite values with magnitude below 65520 (float16 max is {FLOAT16_MAX}). "
        "Hint: keep float32 for this model or rescale the weights."
    )


def float16_bytes_to_float32(data: bytes | memoryview) -> array[float]:
    """Upcast little-endian float16 bytes to a float32 ``array('f')`` exactly.

    Args:
        data: An even number of bytes of little-endian binary16.

    Returns:
        A new ``array('f')`` with ``len(data) // 2`` values.

    Raises:
        PackageError: The byte count is odd.
    """
    if len(data) % 2:
        raise PackageError(f"float16 data has {len(data)} bytes; expected an even count")
    return array("f", struct.unpack(f"<{len(data) // 2}e", data))


def float32_le_bytes_to_array(data: bytes | memoryview) -> array[float]:
    """Copy little-endian float32 bytes into a host-order ``array('f')``.

    Args:
        data: A multiple of four bytes of little-endian binary32.

    Returns:
        A new ``array('f')``.

    Raises:
        PackageError: The byte count is not a multiple of four.
    """
    if len(data) % 4:
        raise PackageError(f"float32 data has {len(data)} bytes; expected a multiple of 4")
    result = array("f")
    result.frombytes(data)
    if not _LITTLE_ENDIAN_HOST:
        result.byteswap()
    return result


def array_to_float32_le_bytes(values: array[float]) -> bytes:
    """Return the little-endian float32 bytes of an ``array('f')``.

    Args:
        values: A float32 array in host byte order.

    Returns:
        ``4 * len(values)`` bytes, little-endian.
    """
    if _LITTLE_ENDIAN_HOST:
        return values.tobytes()
    swapped = array("f", values)
    swapped.byteswap()
    return swapped.tobytes()
