"""Pure-Python safetensors encoding and checked decoding.

This module owns the ``model.safetensors`` member: an 8-byte little-endian header length
``N``, ``N`` bytes of JSON header, then the raw tensor bytes. The writer emits the header
with sorted keys and no spaces except the trailing space padding that makes ``8 + N`` a
multiple of 8 (as the reference library does), and lays tensors out in sorted-name order,
back to back. The reader refuses anything the format does not allow: a header over the size
cap or past the end of the member, a dtype other than F32/F16/I8, offsets that leave gaps,
overlap, run past the buffer or disagree with the shape.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any, Protocol

from evermind.errors import PackageError
from evermind.package._json import loads_object
from evermind.package.tensor import DTYPE_SIZES, Tensor

#: Deepest tensor rank accepted when reading.
MAX_RANK = 8

_METADATA_KEY = "__metadata__"


def encode_safetensors(
    tensors: Mapping[str, Tensor],
    *,
    dtype: str | Mapping[str, str],
    metadata: Mapping[str, str] | None = None,
) -> bytes:
    """Serialise tensors to safetensors bytes, reproducibly.

    Args:
        tensors: Tensor name -> tensor.
        dtype: The storage dtype of every tensor (``"F32"`` or ``"F16"``; float32 is
            rounded to nearest even), or name -> dtype (``"I8"`` for int8 tensors).
        metadata: Optional string -> string map stored under ``__metadata__``.

    Returns:
        The complete file contents.

    Raises:
        PackageError: A name is empty, a dtype is unsupported, or a value does not fit.
    """
    dtypes = dtype if not isinstance(dtype, str) else dict.fromkeys(tensors, dtype)
    unknown = sorted(set(dtypes.values()) - set(DTYPE_SIZES))
    if unknown or set(dtypes) != set(tensors):
        raise PackageError(
            f"safetensors dtype {unknown[0] if unknown else dtype!r} is not supported (or not "
            f"given for every tensor); expected one of {sorted(DTYPE_SIZES)} per tensor"
        )
    header: dict[str, Any] = {}
    if metadata:
        header[_METADATA_KEY] = {str(key): str(value) for key, value in metadata.items()}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        if not name or name == _METADATA_KEY:
            raise PackageError(f"tensor name {name!r} is reserved or empty; expected a real name")
        raw = tensors[name].encode(dtypes[name], name=name)
        header[name] = {
            "data_offsets": [offset, offset + len(raw)],
            "dtype": dtypes[name],
            "shape": list(tensors[name].shape),
        }
        chunks.append(raw)
        offset += len(raw)
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("ascii")
    header_bytes += b" " * (-len(header_bytes) % 8)
    return b"".join([struct.pack("<Q", len(header_bytes)), header_bytes, *chunks])


def _int_list(value: Any) -> bool:
    """True when `value` is a list of non-negative ints (bools excluded)."""
    return isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value
    )


def _check_entry(member: str, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
    """Validate one header entry and return ``(dtype, shape, begin, end)``."""
    where = f"{member}: tensor {name!r}"
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        found = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise PackageError(
            f"{where}: header entry must have exactly dtype, shape and data_offsets; found {found}"
        )
    dtype = entry["dtype"]
    if dtype not in DTYPE_SIZES:
        raise PackageError(
            f"{where}: dtype {dtype!r} is not allowed; expected one of {sorted(DTYPE_SIZES)}"
        )
    shape, offsets = entry["shape"], entry["data_offsets"]
    if not _int_list(shape) or len(shape) > MAX_RANK:
        raise PackageError(
            f"{where}: shape {shape!r} is invalid; expected a list of at most {MAX_RANK} "
            "non-negative ints"
        )
    if not _int_list(offsets) or len(offsets) != 2 or offsets[0] > offsets[1]:
        raise PackageError(
            f"{where}: data_offsets {offsets!r} is invalid; expected [begin, end] with "
            "0 <= begin <= end"
        )
    return dtype, tuple(shape), offsets[0], offsets[1]


class PieceReader(Protocol):
    """What :func:`read_safetensors` reads from: exact pieces of a member of known size."""

    size: int

    def read(self, count: int) -> bytes:
        """Exactly ``count`` more bytes (or raise :class:`~evermind.errors.PackageError`)."""
        ...


def _check_prefix(header_len: int, size: int, member: str, max_header_bytes: int) -> None:
    """Check the header length prefix against the cap and the member size."""
    if header_len > max_header_bytes:
        raise PackageError(
            f"{member}: header declares {header_len} bytes; the limit is {max_header_bytes}. "
            "Hint: raise PackageLimits.max_safetensors_header_bytes only for trusted files"
        )
    if 8 + header_len > size:
        raise PackageError(
            f"{member}: header declares {header_len} bytes but only {size - 8} follow "
            "the length prefix; the member is truncated or corrupt"
        )


def _parse_header(raw: bytes, member: str) -> dict[str, Any]:
    if not raw.startswith(b"{"):
        raise PackageError(f"{member}: header must start with '{{', found {raw[:8]!r}")
    return loads_object(raw, member=f"{member} header")


def _read_header(
    data: bytes | memoryview, member: str, max_header_bytes: int
) -> tuple[dict[str, Any], int]:
    """Check the length prefix, parse the JSON header, and return it with the data start."""
    if len(data) < 8:
        raise PackageError(
            f"{member}: {len(data)} bytes is too short; expected an 8-byte header length"
        )
    (header_len,) = struct.unpack_from("<Q", data, 0)
    _check_prefix(header_len, len(data), member, max_header_bytes)
    return _parse_header(bytes(data[8 : 8 + header_len]), member), 8 + header_len


def _layout(
    header: dict[str, Any], data_bytes: int, member: str
) -> tuple[list[tuple[str, str, tuple[int, ...], int, int]], dict[str, str]]:
    """Validate the header against a data section of ``data_bytes`` bytes.

    Returns:
        ``([(name, dtype, shape, begin, end)] in data order, metadata)``.
    """
    metadata = header.pop(_METADATA_KEY, {})
    if not isinstance(metadata, dict) or not all(
        isinstance(value, str) for value in metadata.values()
    ):
        raise PackageError(
            f"{member}: __metadata__ must map strings to strings, found {metadata!r}"
        )
    entries = sorted(
        ((_check_entry(member, name, entry), name) for name, entry in header.items()),
        key=lambda item: (item[0][2], item[0][3], item[1]),
    )
    layout: list[tuple[str, str, tuple[int, ...], int, int]] = []
    expected_begin = 0
    for (dtype, shape, begin, end), name in entries:
        if begin != expected_begin:
            problem = "overlaps the previous tensor" if begin < expected_begin else "leaves a gap"
            raise PackageError(
                f"{member}: tensor {name!r} starts at byte {begin} and {problem}; expected "
                f"contiguous data starting at {expected_begin}"
            )
        nbytes = math.prod(shape) * DTYPE_SIZES[dtype]
        if end - begin != nbytes:
            raise PackageError(
                f"{member}: tensor {name!r} has shape {shape} of {dtype} ({nbytes} bytes) but "
                f"data_offsets span {end - begin} bytes"
            )
        if end > data_bytes:
            raise PackageError(
                f"{member}: tensor {name!r} ends at byte {end} but the data section holds "
                f"{data_bytes} bytes; the member is truncated"
            )
        layout.append((name, dtype, shape, begin, end))
        expected_begin = end
    if expected_begin != data_bytes:
        raise PackageError(
            f"{member}: tensors cover {expected_begin} bytes but the data section holds "
            f"{data_bytes}; expected no trailing bytes"
        )
    return layout, metadata


def decode_safetensors(
    data: bytes | memoryview, *, member: str = "model.safetensors", max_header_bytes: int
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Parse and sanity-check safetensors bytes.

    Args:
        data: The whole member.
        member: The member name used in error messages.
        max_header_bytes: Refuse a header longer than this before reading it.

    Returns:
        ``(tensors, metadata)``: tensors keep their stored dtype as raw bytes.

    Raises:
        PackageError: Any structural problem; the message names the tensor or field.
    """
    header, base = _read_header(data, member, max_header_bytes)
    buffer = memoryview(data)[base:]
    layout, metadata = _layout(header, len(buffer), member)
    tensors = {
        name: Tensor(shape=shape, data=bytes(buffer[begin:end]), dtype=dtype)
        for name, dtype, shape, begin, end in layout
    }
    return tensors, metadata


def read_safetensors(
    source: PieceReader, *, member: str = "model.safetensors", max_header_bytes: int
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Parse and check a safetensors member read in pieces, upcasting each tensor as it is read.

    The header is checked whole (every offset against the member size) before any tensor
    data is read; then each float tensor is read, converted to float32 and its raw bytes
    dropped, so memory peaks at the float32 tensors plus one tensor's raw bytes, never the
    member twice. ``I8`` tensors stay raw int8 bytes (their floats need the per-row scales,
    which the reader attaches; see :mod:`evermind.package.int8`).

    Args:
        source: The member (:meth:`evermind.package.archive.SafeArchive.stream`).
        member: The member name used in error messages.
        max_header_bytes: Refuse a header longer than this before reading it.

    Returns:
        ``(tensors, stored dtypes)``: float32 ``array('f')`` tensors (``I8`` ones as raw
        bytes), and each tensor's dtype as stored (``"F32"``/``"F16"``/``"I8"``).

    Raises:
        PackageError: Any structural problem; the message names the tensor or field.
    """
    if source.size < 8:
        raise PackageError(
            f"{member}: {source.size} bytes is too short; expected an 8-byte header length"
        )
    (header_len,) = struct.unpack("<Q", source.read(8))
    _check_prefix(header_len, source.size, member, max_header_bytes)
    header = _parse_header(source.read(header_len), member)
    layout, _ = _layout(header, source.size - 8 - header_len, member)
    tensors: dict[str, Tensor] = {}
    stored: dict[str, str] = {}
    for name, dtype, shape, begin, end in layout:
        raw = Tensor(shape=shape, data=source.read(end - begin), dtype=dtype)
        tensors[name] = raw if dtype == "I8" else Tensor(shape, raw.to_float32(), "F32")
        stored[name] = dtype
        del raw
    return tensors, stored
