"""Fuzzing read_package: truncations and byte flips give a Package or a PackageError, never else.

A flipped byte may land somewhere harmless (e.g. the alignment padding or the "version made
by" field) and still verify; anything else must be refused with PackageError, and never via
the reader's last-resort net (whose message says "no specific check caught").
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evermind.errors import PackageError
from evermind.package import Package, read_package, write_package
from tests.unit.test_package_support import tiny_package_kwargs

GOOD = write_package(**tiny_package_kwargs())
GOOD_F16 = write_package(**tiny_package_kwargs(dtype="float16"))
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(data: bytes) -> Package | None:
    """Read `data`; return the package, or None when it was refused with PackageError."""
    try:
        return read_package(data)
    except PackageError as err:
        assert "no specific check caught" not in str(err), str(err)
        return None


@FUZZ
@given(st.integers(min_value=0, max_value=len(GOOD) - 1))
def test_any_truncation_is_refused(cut: int) -> None:
    assert outcome(GOOD[:cut]) is None


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.integers(min_value=0, max_value=len(GOOD) - 1),
        st.integers(min_value=0, max_value=2000),  # local headers, manifest, card
        st.integers(min_value=len(GOOD) - 600, max_value=len(GOOD) - 1),  # central directory
    ),
    st.integers(min_value=1, max_value=255),
)
def test_any_byte_flip_is_refused_or_harmless(index: int, mask: int) -> None:
    data = bytearray(GOOD)
    data[index] ^= mask
    package = outcome(bytes(data))
    if package is not None:  # a harmless byte: the contents must be exactly the original
        original = read_package(GOOD)
        assert package.manifest == original.manifest
        assert all(
            package.tensors[name].data == original.tensors[name].data for name in original.tensors
        )


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(GOOD_F16) - 1), st.integers(0, 255)), max_size=8))
def test_several_byte_overwrites_on_float16(edits: list[tuple[int, int]]) -> None:
    data = bytearray(GOOD_F16)
    for index, value in edits:
        data[index] = value
    outcome(bytes(data))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2048))
def test_random_bytes_are_refused(data: bytes) -> None:
    assert outcome(b"PK\x03\x04" + data) is None
