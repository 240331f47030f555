"""Checkpoints: named float32 tensors plus JSON metadata in one byte string (browser-safe).

Layout: ``b"EVCK"``, format version (u32 LE), header length (u32 LE), a UTF-8 JSON header
``{"meta": {...}, "tensors": [[name, count, offset], ...]}``, then the tensors' raw
little-endian float32 data, back to back. The same bytes go to IndexedDB in the tab and to
a file natively (written atomically by the caller).
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Mapping
from typing import Any

from evermind.errors import EvermindError

MAGIC = b"EVCK"
VERSION = 1


class CheckpointError(EvermindError):
    """A checkpoint is truncated, of another format version, or inconsistent."""


def pack_checkpoint(meta: Mapping[str, Any], tensors: Mapping[str, array[float]]) -> bytes:
    """Serialises ``meta`` (JSON-able) and float32 ``tensors`` into one byte string."""
    index: list[list[Any]] = []
    offset = 0
    for name, values in tensors.items():
        if values.typecode != "f":
            raise CheckpointError(
                f"checkpoint tensor {name!r}: expected array('f'), got {values.typecode!r}"
            )
        index.append([name, len(values), offset])
        offset += 4 * len(values)
    header = json.dumps({"meta": dict(meta), "tensors": index}, separators=(",", ":")).encode()
    parts = [MAGIC, struct.pack("<II", VERSION, len(header)), header]
    for values in tensors.values():
        if sys.byteorder == "big":
            values = array("f", values)
            values.byteswap()
        parts.append(values.tobytes())
    return b"".join(parts)


def unpack_checkpoint(
    data: bytes | bytearray | memoryview,
) -> tuple[dict[str, Any], dict[str, array[float]]]:
    """Parses bytes written by :func:`pack_checkpoint` into (meta, tensors)."""
    view = memoryview(data).cast("B")
    if len(view) < 12 or bytes(view[:4]) != MAGIC:
        raise CheckpointError("not an Evermind checkpoint (missing EVCK magic)")
    version, header_len = struct.unpack("<II", view[4:12])
    if version != VERSION:
        raise CheckpointError(f"checkpoint format version {version}; this build reads {VERSION}")
    if 12 + header_len > len(view):
        raise CheckpointError(f"checkpoint truncated: header needs {header_len} bytes")
    try:
        header = json.loads(bytes(view[12 : 12 + header_len]))
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"checkpoint header is not valid JSON: {err}") from err
    body = view[12 + header_len :]
    tensors: dict[str, array[float]] = {}
    for name, count, offset in header["tensors"]:
        end = offset + 4 * count
        if end > len(body):
            raise CheckpointError(f"checkpoint truncated inside tensor {name!r}")
        values = array("f")
        values.frombytes(body[offset:end])
        if sys.byteorder == "big":
            values.byteswap()
        tensors[name] = values
    return header["meta"], tensors
