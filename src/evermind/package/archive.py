"""Opening an untrusted ZIP archive safely, with limits checked before any allocation.

This module owns the ZIP side of reading a package. It reads the end-of-central-directory
record itself first (member count, directory size, no zip64), only then lets
:mod:`zipfile` parse the directory, refuses unsafe entries (traversal, absolute or
backslash names, duplicates, directories, encryption, compression other than STORE or
DEFLATE, overlapping entries, bomb-like ratios, total size over the limit) and reads a
member only up to its declared, already-checked size. The archive is read from a file
object, never copied whole into memory: a large member is streamed (:meth:`SafeArchive.stream`)
and hashed as it is read. Every failure is a :class:`~evermind.errors.PackageError` naming
the member.
"""

from __future__ import annotations

import hashlib
import io
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO, BinaryIO

from evermind.errors import PackageError
from evermind.package.limits import PackageLimits
from evermind.package.manifest import check_member_name
from evermind.package.schema import MANIFEST

#: Exceptions that zipfile, zlib and struct raise on malformed input.
ZIP_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    ValueError,
    RuntimeError,
    NotImplementedError,
    OverflowError,
    IndexError,
    KeyError,
)

_END_RECORD = struct.Struct("<4sHHHHIIH")
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_LOCAL_HEADER_SIZE = 30
#: Central-directory bytes allowed per member (46-byte record + name + modest extras).
_DIRECTORY_BYTES_PER_MEMBER = 4096
#: Bytes read at a time when a member is only hashed.
_SKIP_BYTES = 1 << 20
_ALLOWED_METHODS = {zipfile.ZIP_STORED: "STORE", zipfile.ZIP_DEFLATED: "DEFLATE"}


@dataclass(frozen=True)
class _EndRecord:
    """The fields of the end-of-central-directory record the limits need."""

    position: int
    entries: int
    directory_size: int
    directory_offset: int


#: Bytes at the end of a file that can hold the end record (its comment is at most 64 KiB)
#: and the zip64 locator before it.
_TAIL_BYTES = _END_RECORD.size + 0xFFFF + 20


def _read_tail(stream: BinaryIO, size: int) -> tuple[bytes, int]:
    """The last bytes of the file that can hold the end record, and their file offset."""
    start = max(0, size - _TAIL_BYTES)
    stream.seek(start)
    tail = stream.read(size - start)
    if len(tail) != size - start:
        raise PackageError(f"archive: read {start + len(tail)} of {size} bytes; it changed")
    return tail, start


def _find_end_record(data: bytes, start: int = 0) -> _EndRecord:
    """Locate and parse the end-of-central-directory record, refusing zip64.

    Args:
        data: The end of the file (:func:`_read_tail`), or the whole file.
        start: The file offset of ``data[0]``.
    """
    if len(data) < _END_RECORD.size:
        raise PackageError(
            f"archive: {len(data)} bytes is too short for a ZIP file; expected a .evermind "
            "package (truncated download?)"
        )
    position = len(data) - _END_RECORD.size
    if data[position : position + 4] != _END_SIGNATURE:
        position = data.rfind(_END_SIGNATURE, max(0, len(data) - _END_RECORD.size - 0xFFFF))
    if position < 0 or position + _END_RECORD.size > len(data):
        raise PackageError(
            "archive: no ZIP end-of-central-directory record found; expected a .evermind "
            "package (the file is truncated or not a ZIP)"
        )
    _, disk, start_disk, on_disk, entries, size, offset, comment = _END_RECORD.unpack_from(
        data, position
    )
    if position + _END_RECORD.size + comment != len(data):
        raise PackageError(
            f"archive: {len(data) - position - _END_RECORD.size - comment} bytes follow the ZIP's "
            "end record; a package is exactly one ZIP (refused: appended data or a polyglot)"
        )
    if position >= 20 and data[position - 20 : position - 16] == _ZIP64_LOCATOR_SIGNATURE:
        raise PackageError("archive: uses zip64; the format never needs it (refused)")
    if disk or start_disk or on_disk != entries:
        raise PackageError("archive: spans several disks; expected a single-file ZIP")
    if entries == 0xFFFF or size == 0xFFFFFFFF or offset == 0xFFFFFFFF:
        raise PackageError("archive: uses zip64 markers; the format never needs them (refused)")
    return _EndRecord(start + position, entries, size, offset)


def _check_directory(end: _EndRecord, limits: PackageLimits) -> None:
    """Apply the member-count and directory-size limits from the end record alone."""
    if end.entries > limits.max_members:
        raise PackageError(
            f"archive: has {end.entries} members; the limit is {limits.max_members} "
            "(PackageLimits.max_members)"
        )
    cap = limits.max_members * _DIRECTORY_BYTES_PER_MEMBER
    if end.directory_size > cap:
        raise PackageError(
            f"archive: central directory is {end.directory_size} bytes; expected at most {cap} "
            f"for {limits.max_members} members"
        )
    if end.directory_offset + end.directory_size > end.position:
        raise PackageError(
            "archive: central directory runs past the end record; the file is corrupt"
        )
    if end.directory_offset + end.directory_size != end.position:
        raise PackageError(
            f"archive: {end.position - end.directory_offset - end.directory_size} bytes lie "
            "between the central directory and the end record, or before the first member; "
            "a package is exactly one ZIP (refused: prepended data or a polyglot)"
        )


class SafeArchive:
    """A ZIP archive whose directory passed every safety check.

    Attributes:
        names: Member names in central-directory order.
    """

    def __init__(self, source: bytes | BinaryIO, limits: PackageLimits) -> None:
        """Check `source` as a package archive under `limits`.

        Args:
            source: The whole file's bytes, or the file opened for binary reading (seekable;
                it must stay open while the archive is used, and is never read whole).
            limits: The limits to enforce.

        Raises:
            PackageError: The archive is malformed, unsafe, or over a limit.
        """
        stream: BinaryIO = io.BytesIO(source) if isinstance(source, bytes) else source
        try:
            size = stream.seek(0, io.SEEK_END)
            if size > limits.max_archive_bytes:
                raise PackageError(
                    f"archive: {size} bytes exceeds the limit of {limits.max_archive_bytes} "
                    "(PackageLimits.max_archive_bytes)"
                )
            tail, start = _read_tail(stream, size)
        except OSError as err:
            raise PackageError(f"archive: cannot be read ({err})") from err
        _check_directory(_find_end_record(tail, start), limits)
        del tail
        try:
            self._zip = zipfile.ZipFile(stream)
            infos = self._zip.infolist()
        except ZIP_ERRORS as err:
            raise PackageError(f"archive: not a readable ZIP file ({err})") from err
        if len(infos) > limits.max_members:
            raise PackageError(
                f"archive: directory holds {len(infos)} entries; the limit is "
                f"{limits.max_members} (PackageLimits.max_members)"
            )
        self._infos: dict[str, zipfile.ZipInfo] = {}
        total = 0
        for info in infos:
            self._check_entry(info, limits)
            total += info.file_size
            if total > limits.max_total_bytes:
                raise PackageError(
                    f"archive: members declare more than {limits.max_total_bytes} bytes "
                    f"uncompressed (at member {info.filename!r}); "
                    "PackageLimits.max_total_bytes refuses it"
                )
        self._check_layout(infos)
        self.names = [info.filename for info in infos]

    def _check_entry(self, info: zipfile.ZipInfo, limits: PackageLimits) -> None:
        """Refuse one unsafe directory entry."""
        # orig_filename is the name as stored; zipfile's filename may be altered (NUL cut,
        # os.sep replaced), so the safety checks look at the original.
        name = info.orig_filename
        check_member_name(name.rstrip("/") or name)
        if info.filename != name:
            raise PackageError(f"member {name!r}: contains a NUL or separator zipfile rewrites")
        if name in self._infos:
            raise PackageError(f"member {name!r}: appears twice in the archive; expected unique")
        if info.is_dir():
            raise PackageError(f"member {name!r}: is a directory entry; expected files only")
        if info.flag_bits & 0x41:
            raise PackageError(f"member {name!r}: is encrypted; packages are never encrypted")
        if info.compress_type not in _ALLOWED_METHODS:
            raise PackageError(
                f"member {name!r}: compression method {info.compress_type} is not allowed; "
                "expected STORE (0) or DEFLATE (8)"
            )
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise PackageError(
                f"member {name!r}: STOREd but sizes differ ({info.compress_size} stored, "
                f"{info.file_size} declared)"
            )
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > limits.ratio_floor_bytes and ratio > limits.max_compression_ratio:
            raise PackageError(
                f"member {name!r}: compression ratio {ratio:.0f}:1 ({info.file_size} bytes from "
                f"{info.compress_size}) exceeds {limits.max_compression_ratio:g}:1; refusing a "
                "possible zip bomb"
            )
        self._infos[name] = info

    def _check_layout(self, infos: list[zipfile.ZipInfo]) -> None:
        """Refuse overlapping entries and a manifest that is not the first member."""
        if not infos or infos[0].filename != MANIFEST:
            first = infos[0].filename if infos else None
            raise PackageError(f"archive: first member is {first!r}; expected {MANIFEST!r} first")
        by_offset = sorted(infos, key=lambda item: item.header_offset)
        if by_offset[0].header_offset != 0:
            raise PackageError(
                f"archive: {by_offset[0].header_offset} bytes come before the first member; a "
                "package is exactly one ZIP (refused: prepended data or a polyglot)"
            )
        if by_offset[0] is not infos[0]:
            raise PackageError(
                f"archive: {MANIFEST!r} is not stored first in the file; expected it at the "
                "start so streaming readers see it first"
            )
        boundaries = [item.header_offset for item in by_offset[1:]]
        boundaries.append(self._zip.start_dir)
        for item, limit in zip(by_offset, boundaries, strict=True):
            least_end = (
                item.header_offset
                + _LOCAL_HEADER_SIZE
                + len(item.orig_filename)  # names are ASCII (checked above)
                + item.compress_size
            )
            if least_end > limit:
                raise PackageError(
                    f"member {item.filename!r}: its data overlaps the next entry or the "
                    "directory; the archive is corrupt or crafted"
                )

    def close(self) -> None:
        """Release the underlying :class:`zipfile.ZipFile`."""
        self._zip.close()

    def size(self, name: str) -> int:
        """Return the declared uncompressed size of a member."""
        return self._infos[name].file_size

    def _sized(self, name: str, limit: int, limit_name: str) -> zipfile.ZipInfo:
        """The member's entry, refused when its declared size is over `limit`."""
        info = self._infos[name]
        if info.file_size > limit:
            raise PackageError(
                f"member {name!r}: declares {info.file_size} bytes; the limit is {limit} "
                f"(PackageLimits.{limit_name})"
            )
        return info

    def read(self, name: str, *, limit: int, limit_name: str) -> bytes:
        """Read one member, refusing it before decompression when it is over `limit`.

        Args:
            name: The member name (must be in :attr:`names`).
            limit: Largest uncompressed size accepted.
            limit_name: The :class:`PackageLimits` field behind `limit`, for the message.

        Returns:
            The uncompressed contents (CRC-checked by :mod:`zipfile`).

        Raises:
            PackageError: The member is too large, truncated, or fails to decompress or
                its CRC.
        """
        info = self._sized(name, limit, limit_name)
        try:
            with self._zip.open(info) as stream:
                data = stream.read(info.file_size)
                trailing = stream.read(1)
        except ZIP_ERRORS as err:
            raise PackageError(f"member {name!r}: cannot be read ({err}); it is corrupt") from err
        if len(data) != info.file_size or trailing:
            raise PackageError(
                f"member {name!r}: decompressed to {len(data)} bytes; expected {info.file_size}"
            )
        return data

    def stream(
        self, name: str, *, limit: int, limit_name: str, hashed: bool = True
    ) -> MemberStream:
        """Open one member for reading in pieces, refusing it when it is over `limit`.

        Args:
            name: The member name (must be in :attr:`names`).
            limit: Largest uncompressed size accepted.
            limit_name: The :class:`PackageLimits` field behind `limit`, for the message.
            hashed: Whether the reads are sha256-hashed (:meth:`MemberStream.sha256`).

        Returns:
            A :class:`MemberStream`: exact reads, hashed as they go; close it.

        Raises:
            PackageError: The member is too large or cannot be opened.
        """
        info = self._sized(name, limit, limit_name)
        try:
            return MemberStream(name, self._zip.open(info), info.file_size, hashed)
        except ZIP_ERRORS as err:
            raise PackageError(f"member {name!r}: cannot be read ({err}); it is corrupt") from err


class MemberStream:
    """One archive member read in exact pieces, sha256-hashed as it is read.

    Attributes:
        name: The member name.
        size: Its declared uncompressed size.
    """

    def __init__(self, name: str, stream: IO[bytes], size: int, hashed: bool = True) -> None:
        self.name = name
        self.size = size
        self._stream = stream
        self._hash = hashlib.sha256()
        self._hashed = hashed
        self._offset = 0

    def read(self, count: int) -> bytes:
        """Exactly `count` more bytes of the member (decompressed, CRC-checked at its end).

        Raises:
            PackageError: The member ends early or fails to decompress or its CRC.
        """
        if count > self.size - self._offset:
            raise PackageError(
                f"member {self.name!r}: a read of {count} bytes at byte {self._offset} runs "
                f"past its declared {self.size} bytes"
            )
        try:
            data = self._stream.read(count)
        except ZIP_ERRORS as err:
            raise PackageError(
                f"member {self.name!r}: cannot be read ({err}); it is corrupt"
            ) from err
        if len(data) != count:
            raise PackageError(
                f"member {self.name!r}: decompressed to {self._offset + len(data)} bytes; "
                f"expected {self.size}"
            )
        self._offset += count
        if self._hashed:
            self._hash.update(data)
        return data

    def skip(self) -> None:
        """Read (and hash) the rest of the member in pieces, keeping none of it."""
        while self._offset < self.size:
            self.read(min(_SKIP_BYTES, self.size - self._offset))

    def sha256(self) -> str:
        """The hex sha256 of the whole member, once every byte was read exactly.

        Raises:
            PackageError: Bytes remain unread, or the member holds more than it declares.
        """
        self.finish()
        return self._hash.hexdigest()

    def finish(self) -> None:
        """Check that every byte was read and no more follow (zipfile checks the CRC).

        Raises:
            PackageError: Bytes remain unread, or the member holds more than it declares.
        """
        if self._offset != self.size:
            raise PackageError(
                f"member {self.name!r}: {self.size - self._offset} of its {self.size} bytes "
                "were left unread; expected the reader to consume all of it"
            )
        try:
            trailing = self._stream.read(1)
        except ZIP_ERRORS as err:
            raise PackageError(
                f"member {self.name!r}: cannot be read ({err}); it is corrupt"
            ) from err
        if trailing:
            raise PackageError(
                f"member {self.name!r}: decompressed to more than {self.size} bytes; "
                f"expected {self.size}"
            )

    def close(self) -> None:
        """Release the member's decompressor."""
        self._stream.close()
