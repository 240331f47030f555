"""Float32 -> float16 round-to-nearest-even and exact upcast, on chosen and exhaustive values."""

from __future__ import annotations

import math
import struct
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evermind.errors import PackageError
from evermind.package.float16 import (
    float16_bytes_to_float32,
    float32_le_bytes_to_array,
    float32_to_float16_bytes,
)
from evermind.package.tensor import Tensor


def to_half_bits(value: float) -> int:
    """Bits of the float16 our converter produces for one value."""
    (bits,) = struct.unpack("<H", float32_to_float16_bytes(array("f", [value]), name="t"))
    return int(bits)


@pytest.mark.parametrize(
    ("value", "bits"),
    [
        (1.0, 0x3C00),
        (1.0 + 2**-11, 0x3C00),  # tie between 1 and 1+2^-10: even mantissa (down)
        (1.0 + 3 * 2**-11, 0x3C02),  # tie between 1+2^-10 and 1+2^-9: even (up)
        (1.0 + 2**-11 + 2**-20, 0x3C01),  # just above the tie: up
        (-(1.0 + 2**-11), 0xBC00),  # ties are symmetric
        (2**-24, 0x0001),  # smallest subnormal, exact
        (2**-25, 0x0000),  # tie between 0 and 2^-24: even (zero)
        (3 * 2**-25, 0x0002),  # tie between 1 and 2 subnormal ulps: even (2)
        (2**-14 - 2**-24, 0x03FF),  # largest subnormal, exact
        (2**-14, 0x0400),  # smallest normal
        (65504.0, 0x7BFF),  # float16 max
        (65519.99, 0x7BFF),  # below the overflow tie: rounds to max
        (-0.0, 0x8000),  # sign of zero kept
        (0.1, 0x2E66),
    ],
)
def test_round_to_nearest_even(value: float, bits: int) -> None:
    assert to_half_bits(value) == bits, f"{value!r} -> {to_half_bits(value):#06x}"


@pytest.mark.parametrize("value", [65520.0, -65520.0, 1e30, math.inf, -math.inf, math.nan])
def test_values_outside_float16_are_errors(value: float) -> None:
    data = array("f", [0.5, value, 1.0])
    with pytest.raises(PackageError, match=r"tensor 'w'.*flat index 1"):
        float32_to_float16_bytes(data, name="w")


def test_every_finite_half_survives_upcast_and_back() -> None:
    halves = [bits for bits in range(1 << 16) if (bits >> 10) & 0x1F != 0x1F]
    raw = struct.pack(f"<{len(halves)}H", *halves)
    upcast = float16_bytes_to_float32(raw)
    assert float32_to_float16_bytes(upcast, name="all") == raw
    reference = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    np.testing.assert_array_equal(np.asarray(upcast, dtype=np.float32), reference)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32, min_value=-65504, max_value=65504), max_size=64))
def test_matches_numpy_round_to_nearest_even(values: list[float]) -> None:
    ours = float32_to_float16_bytes(array("f", values), name="t")
    theirs = np.asarray(values, dtype=np.float32).astype("<f2").tobytes()
    assert ours == theirs


def test_tensor_encode_and_decode_both_dtypes() -> None:
    values = array("f", [0.25, -3.5, 1.0 + 2**-11, 1e-8])
    tensor = Tensor(shape=(2, 2), data=values)
    f32 = tensor.encode("F32", name="t")
    assert float32_le_bytes_to_array(f32) == values
    f16 = tensor.encode("F16", name="t")
    half = Tensor(shape=(2, 2), data=f16, dtype="F16")
    assert list(half.to_float32()) == [0.25, -3.5, 1.0, 0.0]
    assert half.encode("F16", name="t") == f16
    assert Tensor(shape=(2, 2), data=f32).to_float32() == values


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"shape": (2, 3), "data": array("f", [0.0] * 5)}, "needs 6 elements"),
        ({"shape": (2, -1), "data": array("f")}, "non-negative"),
        ({"shape": [2], "data": array("f", [0.0] * 2)}, "tuple"),
        ({"shape": (2,), "data": array("d", [0.0] * 2)}, "array\\('d'\\)"),
        ({"shape": (2,), "data": b"\0" * 7, "dtype": "F32"}, "multiple of 4"),
        ({"shape": (2,), "data": b"\0" * 4, "dtype": "BF16"}, "BF16"),
        ({"shape": (2,), "data": [0.0, 1.0]}, "list"),
    ],
)
def test_tensor_refuses_inconsistent_data(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(PackageError, match=fragment):
        Tensor(**kwargs)  # type: ignore[arg-type]
