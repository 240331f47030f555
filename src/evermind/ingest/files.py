"""Which files a sync reads: folders walked, hidden and binary files skipped, ids assigned.

A file's source id is its path relative to the sync's *base* folder (the current directory
unless given), with ``/`` separators, or its absolute path when it lies outside the base.
Folders are walked in sorted order; hidden files and folders (a name starting with ``.``)
are left out silently; binaries (a NUL byte in the first 8 KiB), files no parser handles and
files over the size limit are skipped with the reason reported. Browser-safe (Pyodide has a
file system too): standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from evermind.errors import InputError
from evermind.ingest.documents import check_source_id
from evermind.ingest.registry import ParserRegistry

#: Bytes sniffed for a NUL to call a file binary.
SNIFF_BYTES = 8192
#: Largest file read by default (bytes).
MAX_FILE_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class FileSource:
    """One file a sync will read: its id, path and parser name."""

    source: str
    path: Path
    parser: str


@dataclass
class Selection:
    """The files to read, the files skipped (``(path, reason)``), the walked folders' ids."""

    files: list[FileSource] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)


def source_id(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` in ``/`` form, or absolute when outside ``base``."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path(os.path.abspath(base)))
    except ValueError:
        return absolute.as_posix()
    return relative.as_posix() if relative.parts else "."


def _why_not(path: Path, max_bytes: int) -> str | None:
    """The reason a file cannot be ingested (binary, too big), or None."""
    size = path.stat().st_size
    if size > max_bytes:
        return f"over {max_bytes} bytes ({size}); hint: raise max_bytes (--max-bytes)"
    with path.open("rb") as handle:
        if b"\0" in handle.read(SNIFF_BYTES):
            return "binary (a NUL byte in its first 8 KiB)"
    return None


def select_files(
    paths: Iterable[str | os.PathLike[str]],
    base: Path,
    registry: ParserRegistry,
    parser: str | None = None,
    max_bytes: int = MAX_FILE_BYTES,
) -> Selection:
    """The files under ``paths`` a sync reads, and those it skips (with the reason).

    Args:
        paths: Files and folders.
        base: The folder source ids are relative to.
        registry: Decides which files have a parser.
        parser: Parse every file with this parser (then no file is skipped for its type).
        max_bytes: Larger files are skipped.

    Raises:
        InputError: A path does not exist; a file named explicitly is binary, too big or of
            a type no parser handles.
    """
    selection = Selection()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            selection.folders.append(source_id(path, base))
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    if name.startswith("."):
                        continue
                    file = Path(folder) / name
                    shown = source_id(file, base)
                    kind = parser or registry.name_for(name)
                    if kind is None:
                        suffix = file.suffix or "(no extension)"
                        selection.skipped.append((shown, f"unknown type {suffix}"))
                        continue
                    reason = _why_not(file, max_bytes) if file.is_file() else "not a file"
                    if reason is not None:
                        selection.skipped.append((shown, reason))
                        continue
                    selection.files.append(FileSource(check_source_id(shown), file, kind))
        elif path.is_file():
            shown = source_id(path, base)
            kind = parser or registry.for_file(str(path))[0]
            reason = _why_not(path, max_bytes)
            if reason is not None:
                raise InputError(f"{shown}: cannot ingest: {reason}")
            selection.files.append(FileSource(check_source_id(shown), path, kind))
        else:
            raise InputError(
                f"{path}: no such file or folder; hint: to drop a source that is gone, "
                "forget it (evermind ingest --forget SOURCE)"
            )
    return selection


__all__ = ["MAX_FILE_BYTES", "FileSource", "Selection", "select_files", "source_id"]
