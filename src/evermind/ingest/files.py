"""Which files a sync reads, and reading them: folders walked without leaving them, ids assigned.

A file's source id is its path relative to the sync's *base* folder (the current directory
unless given), with ``/`` separators, or its absolute path when it lies outside the base.

Ingestion never leaves its root. Every path given is a root: a folder is its own (resolved)
root, a file named explicitly has its folder as its root. Within a root:

- hidden files and folders (a name starting with ``.``) are left out silently;
- a symbolic link (to a file or a folder) is not followed, and is reported, unless
  ``follow_symlinks``; then it is followed only when its target resolves inside the root
  (a ``..`` or an absolute target that leaves it is reported), and a link to a folder the
  walk has been through already (a loop, or a second way in) is reported, not walked again;
- only regular files are read: a FIFO, a socket or a device is reported and never opened;
- binaries (a NUL byte in the first 8 KiB), files no parser handles and files over the size
  limit are skipped with the reason reported.

A selected file is read with :func:`read_source`, which opens it from its root down, folder
by folder, with ``O_NOFOLLOW`` and checks (``fstat``) that it is still the regular file
selected, so a swap between the walk and the read (a file, or a folder on its way, replaced
by a link out of the root) is refused (:mod:`evermind.safefiles`). A file named explicitly
that is refused is an error, or, with ``errors="skip"``, reported like a walked one.
:attr:`Selection.present` holds every file found, read or not, so a folder sync forgets only
files that are gone.
Browser-safe (Pyodide has a file system too): standard library only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from evermind.errors import EvermindError, InputError
from evermind.ingest.documents import check_source_id
from evermind.ingest.registry import ParserRegistry
from evermind.safefiles import (
    FileIdentity,
    RefusedFile,
    inside,
    kind_of,
    open_regular,
    over_limit,
    read_regular,
)

#: Bytes sniffed for a NUL to call a file binary.
SNIFF_BYTES = 8192
#: Largest file read by default (bytes).
MAX_FILE_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class FileSource:
    """One file a sync will read.

    Attributes:
        source: Its source id.
        path: The resolved path that is opened (no symbolic link in it when selected).
        parser: The parser's name.
        identity: The file's device and inode when it was selected (a swap is refused).
        root: The resolved folder it was selected in; it is opened from there down, folder
            by folder, never through a link.
        named: Named explicitly (not found by walking a folder).
    """

    source: str
    path: Path
    parser: str
    identity: FileIdentity | None = None
    root: str | None = None
    named: bool = False


@dataclass
class Selection:
    """The files to read, those skipped (``(path, reason)``) and what a prune must keep.

    Attributes:
        files: The files to read.
        skipped: ``(source id, reason)`` of every file or folder left out, but hidden ones.
        folders: The ids of the folders walked (a prune looks under them).
        present: Ids of every file found, read or skipped: they still exist.
        unlisted: Ids of folders whose contents were not looked at (unreadable, a link not
            followed): sources under them are kept too.
    """

    files: list[FileSource] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: Files named explicitly that were refused (with ``errors="skip"``): asked for, not read.
    failed: list[tuple[str, str]] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    present: set[str] = field(default_factory=set)
    unlisted: list[str] = field(default_factory=list)

    def keeps(self, source: str) -> bool:
        """Whether a stored source may still exist (found here, or under an unlisted folder)."""
        return source in self.present or any(under(source, f) for f in self.unlisted)


def under(source: str, folder: str) -> bool:
    """Whether source id ``source`` lies in the folder whose id is ``folder``."""
    return folder == "." or source.startswith(folder.rstrip("/") + "/")


def source_id(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` in ``/`` form, or absolute when outside ``base``."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path(os.path.abspath(base)))
    except ValueError:
        return absolute.as_posix()
    return relative.as_posix() if relative.parts else "."


def _reason(err: Exception) -> str:
    """Why a path was left out, without the path (a report lists it beside the path)."""
    if isinstance(err, RefusedFile):
        return err.reason
    if isinstance(err, OSError):
        return f"cannot read ({err.strerror or type(err).__name__})"
    return str(err)


class _Walker:
    """One selection's settings and state: walks named folders, checks named files."""

    def __init__(
        self,
        base: Path,
        registry: ParserRegistry,
        parser: str | None,
        max_bytes: int,
        follow_symlinks: bool,
    ) -> None:
        self.base = base
        self.registry = registry
        self.parser = parser
        self.max_bytes = max_bytes
        self.follow = follow_symlinks
        self.selection = Selection()
        self.visited: set[str] = set()

    def resolve(self, path: Path, real: str, root: str, where: str) -> tuple[str, os.stat_result]:
        """``(resolved path, lstat)`` of the entry at ``real``, a link followed if allowed.

        Raises:
            RefusedFile: A link not followed, leaving the root, or leading nowhere.
        """
        status = os.lstat(real)
        if not stat.S_ISLNK(status.st_mode):
            return real, status
        if not self.follow:
            raise RefusedFile(
                path,
                "a symbolic link, not followed; hint: --follow-symlinks (follow_symlinks=True) "
                f"follows links whose target stays inside {where}",
            )
        real = os.path.realpath(real)
        if not inside(root, real):
            raise RefusedFile(path, f"a symbolic link to outside {where}; not followed")
        try:
            return real, os.lstat(real)
        except FileNotFoundError:
            raise RefusedFile(path, "a symbolic link to nothing (broken)") from None

    def check_file(self, path: Path, real: str, status: os.stat_result, root: str) -> FileSource:
        """The source a regular file found at ``path`` (resolved: ``real``) is read as.

        Raises:
            RefusedFile: Not a regular file, a type no parser reads, too big, or binary.
            ConfigError: Its path cannot be a source id.
        """
        if not stat.S_ISREG(status.st_mode):
            raise RefusedFile(path, f"{kind_of(status.st_mode)}, not a regular file")
        kind = self.parser or self.registry.name_for(path.name)
        if kind is None:
            raise RefusedFile(path, f"unknown type {path.suffix or '(no extension)'}")
        shown = check_source_id(source_id(path, self.base))
        if status.st_size > self.max_bytes:
            raise RefusedFile(path, over_limit(self.max_bytes, str(status.st_size)))
        identity = FileIdentity.of(status)
        fd, _ = open_regular(real, identity, root)
        with os.fdopen(fd, "rb") as handle:
            if b"\0" in handle.read(SNIFF_BYTES):
                raise RefusedFile(path, "binary (a NUL byte in its first 8 KiB)")
        return FileSource(shown, Path(real), kind, identity, root)

    def folder(self, path: Path) -> None:
        """Walks a named folder, in sorted order, files of a folder before its subfolders."""
        root = os.path.realpath(path)
        self.selection.folders.append(source_id(path, self.base))
        where = f"the folder {source_id(path, self.base)}"
        self.visited.add(root)
        stack = [(path, root)]
        while stack:
            shown, real = stack.pop()
            subfolders = self._entries(shown, real, root, where)
            stack.extend(reversed(subfolders))

    def _entries(
        self, folder: Path, real_folder: str, root: str, where: str
    ) -> list[tuple[Path, str]]:
        """Takes one folder's files; returns its subfolders to walk, ``(path, resolved)``."""
        selection = self.selection
        try:
            with os.scandir(real_folder) as listing:
                names = sorted(entry.name for entry in listing)
        except OSError as err:
            shown = source_id(folder, self.base)
            selection.skipped.append((shown, f"cannot list the folder ({err.strerror})"))
            selection.unlisted.append(shown)
            return []
        subfolders: list[tuple[Path, str]] = []
        for name in names:
            if name.startswith("."):
                continue
            path = folder / name
            shown = source_id(path, self.base)
            try:
                found = os.path.join(real_folder, name)
                real, status = self.resolve(path, found, root, where)
                if stat.S_ISDIR(status.st_mode):
                    if real != found and real in self.visited:
                        raise RefusedFile(
                            path, "a symbolic link to a folder walked already (a loop)"
                        )
                    self.visited.add(real)
                    subfolders.append((path, real))
                    continue
                selection.present.add(shown)
                selection.files.append(self.check_file(path, real, status, root))
            except (EvermindError, OSError) as err:
                selection.skipped.append((shown, _reason(err)))
                selection.present.add(shown)
                if os.path.isdir(path):  # a link to a folder not walked: its sources stay
                    selection.unlisted.append(shown)
        return subfolders

    def named_file(self, path: Path, errors: Literal["raise", "skip"]) -> None:
        """Checks a file named explicitly; its folder is its root."""
        shown = source_id(path, self.base)
        root = os.path.realpath(path.parent)
        real = os.path.join(root, path.name)
        try:
            real, status = self.resolve(path, real, root, f"its folder {path.parent.as_posix()}")
            file = self.check_file(path, real, status, root)
        except (EvermindError, OSError) as err:
            reason = _reason(err)
            if errors == "raise":
                raise InputError(f"{shown}: cannot ingest: {reason}") from None
            self.selection.failed.append((shown, reason))
            self.selection.present.add(shown)
            return
        self.selection.present.add(file.source)
        self.selection.files.append(
            FileSource(file.source, file.path, file.parser, file.identity, root, named=True)
        )


def select_files(
    paths: Iterable[str | os.PathLike[str]],
    base: Path,
    registry: ParserRegistry,
    parser: str | None = None,
    max_bytes: int = MAX_FILE_BYTES,
    *,
    follow_symlinks: bool = False,
    errors: Literal["raise", "skip"] = "raise",
) -> Selection:
    """The files under ``paths`` a sync reads, and those it skips (with the reason).

    Args:
        paths: Files and folders; each is a root the selection never leaves.
        base: The folder source ids are relative to.
        registry: Decides which files have a parser.
        parser: Parse every file with this parser (then no file is skipped for its type).
        max_bytes: Larger files are skipped.
        follow_symlinks: Follow symbolic links whose target stays inside their root.
        errors: ``"raise"``: a refused file named explicitly is an error; ``"skip"``: it is
            reported in ``failed`` (it was asked for) and the others are still read.

    Raises:
        InputError: A path does not exist; a file named explicitly is refused (not a
            regular file, a link, binary, too big, or of a type no parser handles).
    """
    walker = _Walker(base, registry, parser, max_bytes, follow_symlinks)
    for given in paths:
        path = Path(given)
        try:
            is_folder = stat.S_ISDIR(os.stat(path).st_mode)
        except FileNotFoundError:
            if not os.path.islink(path):
                raise InputError(
                    f"{path}: no such file or folder; hint: to drop a source that is gone, "
                    "forget it (evermind ingest --forget SOURCE)"
                ) from None
            is_folder = False  # a broken link: refused as such
        except OSError as err:
            raise InputError(f"{path}: cannot read ({err.strerror})") from None
        if is_folder:
            walker.folder(path)
        else:
            walker.named_file(path, errors)
    return walker.selection


def read_source(file: FileSource, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a selected file, if it is still the regular file selected.

    Raises:
        RefusedFile: It was replaced (by a link, a FIFO, another file) or grew past
            ``max_bytes`` since it was selected; the message names the source.
        InputError: It cannot be read (gone, no permission).
    """
    try:
        return read_regular(file.path, max_bytes, file.identity, file.root)
    except RefusedFile as err:
        raise RefusedFile(file.source, err.reason) from None
    except OSError as err:
        raise InputError(f"{file.source}: cannot read ({err.strerror})") from None


__all__ = [
    "MAX_FILE_BYTES",
    "FileSource",
    "Selection",
    "read_source",
    "select_files",
    "source_id",
    "under",
]
