"""A minimal, reproducible ZIP writer for `.evermind` packages.

This module owns the archive bytes the writer emits. It is hand-written on :mod:`struct` and
:mod:`zlib` (not :mod:`zipfile`) so that the same members give the same bytes on every
Python version and host: no timestamps (every entry says 1980-01-01 00:00:00), Unix
``-rw-r--r--`` permissions, no data descriptors, no zip64, no comments, members in the
order given. Text members are DEFLATEd (level 9, raw stream); the safetensors member is
STOREd and its data is aligned in the file (an Android-zipalign style ``0xD935`` extra
field pads the local header) so a reader can memory-map the tensors in place.

Deflate output is deterministic for a given zlib implementation; an implementation with a
different matcher (e.g. zlib-ng) may emit other compressed bytes for the same text. The
manifest's checksums are over the uncompressed contents, so they never change.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from evermind.errors import PackageError

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")
_END_OF_CENTRAL_DIRECTORY = struct.Struct("<IHHHHIIH")

_LOCAL_SIGNATURE = 0x04034B50
_CENTRAL_SIGNATURE = 0x02014B50
_END_SIGNATURE = 0x06054B50

METHOD_STORED = 0
METHOD_DEFLATED = 8

#: 1980-01-01 00:00:00 in MS-DOS date/time form, the earliest a ZIP can say.
_DOS_TIME = 0
_DOS_DATE = (0 << 9) | (1 << 5) | 1
#: "made by" Unix (3), spec version 2.0; external attributes: regular file, mode 0644.
_MADE_BY = (3 << 8) | 20
_EXTERNAL_ATTR = 0o100644 << 16
#: Extra-field id used by Android's zipalign for padding; unzip and zipfile skip it.
_ALIGN_EXTRA_ID = 0xD935
_ZIP32_MAX = 0xFFFFFFFF


@dataclass(frozen=True)
class ZipMember:
    """One member to write.

    Attributes:
        name: ASCII path inside the archive.
        data: The uncompressed contents.
        compress: DEFLATE when true, STORE when false.
        align: When > 1, pad the local header so the data starts at a multiple of this.
    """

    name: str
    data: bytes
    compress: bool
    align: int = 1


def _deflate(data: bytes) -> bytes:
    """Raw DEFLATE (no zlib header) at level 9 with fixed parameters."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY)
    return compressor.compress(data) + compressor.flush()


def _align_extra(offset: int, name_len: int, align: int) -> bytes:
    """Return an extra field that makes member data start at a multiple of `align`."""
    if align <= 1:
        return b""
    # Record: id (2), size (2), alignment (2), zero padding; data follows the record.
    fixed = offset + _LOCAL_HEADER.size + name_len + 6
    padding = -fixed % align
    return struct.pack("<HHH", _ALIGN_EXTRA_ID, 2 + padding, align) + b"\0" * padding


def build_zip(members: Sequence[ZipMember]) -> bytes:
    """Assemble a ZIP archive from members, byte-for-byte reproducibly.

    Args:
        members: The members in archive order.

    Returns:
        The archive bytes.

    Raises:
        PackageError: A name is not ASCII or repeats, or the archive would need zip64
            (a member or the archive over 4 GiB, or more than 65535 members).
    """
    if len(members) > 0xFFFF:
        raise PackageError(f"{len(members)} members need zip64; expected at most 65535")
    parts: list[bytes] = []
    central: list[bytes] = []
    offset = 0
    seen: set[str] = set()
    for member in members:
        if member.name in seen:
            raise PackageError(f"member {member.name!r} is given twice; expected unique names")
        seen.add(member.name)
        try:
            name = member.name.encode("ascii")
        except UnicodeEncodeError as err:
            raise PackageError(f"member name {member.name!r} is not ASCII") from err
        method = METHOD_DEFLATED if member.compress else METHOD_STORED
        version = 20 if member.compress else 10
        payload = _deflate(member.data) if member.compress else member.data
        crc = zlib.crc32(member.data)
        if len(member.data) > _ZIP32_MAX or offset > _ZIP32_MAX:
            raise PackageError(
                f"member {member.name!r} or the archive exceeds 4 GiB; zip64 is not supported"
            )
        extra = _align_extra(offset, len(name), member.align)
        sizes = (crc, len(payload), len(member.data), len(name))
        header = _LOCAL_HEADER.pack(
            _LOCAL_SIGNATURE, version, 0, method, _DOS_TIME, _DOS_DATE, *sizes, len(extra)
        )
        entry = _CENTRAL_HEADER.pack(
            _CENTRAL_SIGNATURE,
            _MADE_BY,
            version,
            0,
            method,
            _DOS_TIME,
            _DOS_DATE,
            *sizes,
            0,
            0,
            0,
            0,
            _EXTERNAL_ATTR,
            offset,
        )
        central.append(entry + name)
        parts.extend((header, name, extra, payload))
        offset += len(header) + len(name) + len(extra) + len(payload)
    directory = b"".join(central)
    if offset > _ZIP32_MAX:
        raise PackageError("the archive exceeds 4 GiB; zip64 is not supported")
    end = _END_OF_CENTRAL_DIRECTORY.pack(
        _END_SIGNATURE, 0, 0, len(members), len(members), len(directory), offset, 0
    )
    return b"".join([*parts, directory, end])
