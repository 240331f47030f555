"""The regular-file rule: reading files out of a user's folder without leaving it or hanging.

Ingestion (``evermind ingest``, :mod:`evermind.ingest.files`) and the Studio's static server
(:mod:`evermind.studio.webserver`) read files from a folder someone else may have filled.
Both follow one rule, owned here:

- only **regular files** are read; a FIFO, a socket or a device is refused *before* it is
  opened (opening a FIFO for reading blocks until a writer appears; opening a device can
  have side effects), and checked again after opening;
- a file is opened with ``O_NOFOLLOW`` (the last component is never a symbolic link) and
  ``O_NONBLOCK`` (nothing can block the open), then ``fstat``-ed: what was checked (its
  device and inode) must be what was opened, so a swap between the check and the open
  (a file replaced by a link to ``/etc/passwd``) is refused instead of read; given its root,
  the folders down to it are opened one by one with ``O_NOFOLLOW`` (``openat``), so a folder
  on the way swapped for a link cannot lead out either;
- :func:`inside` says whether a resolved path stays inside a root folder, which is how a
  symbolic link is judged before it is followed.

Refusals raise :class:`RefusedFile` (an :class:`~evermind.errors.InputError`) whose message
says what the path is and why it was not read. Browser-safe: standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from evermind.errors import InputError

#: Flags of every open: read-only, never through a final symbolic link, never blocking.
OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
#: Whether files can be opened folder by folder from a root (``openat`` with ``O_NOFOLLOW``).
BENEATH = (
    os.open in os.supports_dir_fd
    and os.stat in os.supports_dir_fd
    and hasattr(os, "O_DIRECTORY")
    and hasattr(os, "O_NOFOLLOW")
)

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class RefusedFile(InputError):
    """A path the regular-file rule will not read (not regular, outside its root, swapped).

    Attributes:
        path: The path as the caller named it.
        reason: Why it was not read, without the path (what a report lists beside it).
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True)
class FileIdentity:
    """Which file a path named when it was checked: its device and inode numbers."""

    device: int
    inode: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileIdentity:
        """The identity of a ``stat``/``lstat``/``fstat`` result."""
        return cls(status.st_dev, status.st_ino)

    def matches(self, status: os.stat_result) -> bool:
        """Whether ``status`` is the same file (where the platform gives no inode, always)."""
        if self.inode == 0 or status.st_ino == 0:
            return True
        return (self.device, self.inode) == (status.st_dev, status.st_ino)


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words (``"a regular file"``, ``"a FIFO (named pipe)"``)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def inside(root: str | os.PathLike[str], real: str | os.PathLike[str]) -> bool:
    """Whether the resolved path ``real`` is ``root`` or lies under it (both resolved)."""
    root_text, real_text = os.fspath(root), os.fspath(real)
    try:
        return os.path.commonpath([root_text, real_text]) == root_text
    except ValueError:  # different drives, or one relative and one absolute
        return False


def open_regular(
    path: str | os.PathLike[str],
    expected: FileIdentity | None = None,
    root: str | os.PathLike[str] | None = None,
) -> tuple[int, os.stat_result]:
    """Opens a regular file for reading: ``(fd, fstat)``; the caller closes ``fd``.

    Args:
        path: The file; no component of it below ``root`` may be a symbolic link (with
            no ``root``: its last component).
        expected: The identity the file had when it was selected; another file now at
            ``path`` is refused. None: the identity ``lstat`` finds just before the open.
        root: A resolved folder ``path`` lies in: the folders from ``root`` down are opened
            one by one with ``O_NOFOLLOW`` (where the platform has ``dir_fd``), so a folder
            on the way swapped for a link cannot lead the open out of ``root``.

    Raises:
        RefusedFile: ``path`` is not a regular file, not under ``root``, reached through a
            link, or not the file checked (replaced since it was selected, or between the
            check and the open).
        OSError: It cannot be opened (gone, no permission).
    """
    if root is None or not BENEATH:
        return _open_in(None, os.fspath(path), path, expected)
    relative = os.path.relpath(os.fspath(path), os.fspath(root))
    parts = relative.split(os.sep)
    if not inside(root, path) or relative in (os.curdir, os.pardir) or os.pardir in parts:
        raise RefusedFile(path, f"outside {os.fspath(root)}; not read")
    folder = _open_folders(os.fspath(root), parts[:-1], path)
    try:
        return _open_in(folder, parts[-1], path, expected)
    finally:
        os.close(folder)


def _open_folders(root: str, parts: list[str], path: str | os.PathLike[str]) -> int:
    """A descriptor of ``root/parts...``, each folder opened without following a link."""
    fd = os.open(root, _FOLDER_FLAGS)
    try:
        for part in parts:
            try:
                inner = os.open(part, _FOLDER_FLAGS | _NOFOLLOW, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise RefusedFile(
                        path, f"its folder {part!r} is now a symbolic link or a file; not read"
                    ) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_in(
    folder: int | None, name: str, path: str | os.PathLike[str], expected: FileIdentity | None
) -> tuple[int, os.stat_result]:
    """Opens ``name`` in the folder descriptor ``folder`` (None: ``name`` is a path)."""
    checked = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if not stat.S_ISREG(checked.st_mode):  # refused before any open: a FIFO's would block
        raise RefusedFile(path, f"{kind_of(checked.st_mode)}, not a regular file")
    want = expected or FileIdentity.of(checked)
    if not want.matches(checked):
        raise RefusedFile(path, "replaced by another file since it was selected; hint: run again")
    fd = os.open(name, OPEN_FLAGS, dir_fd=folder)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or not want.matches(status):
            raise RefusedFile(
                path,
                f"changed between the check and the open (now {kind_of(status.st_mode)}, "
                "another file); hint: run again",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def read_regular(
    path: str | os.PathLike[str],
    max_bytes: int,
    expected: FileIdentity | None = None,
    root: str | os.PathLike[str] | None = None,
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (see :func:`open_regular`).

    At most ``max_bytes + 1`` bytes are read, so a file that grows while it is read (or a
    file whose ``stat`` size understates it) costs no more than the limit.

    Raises:
        RefusedFile: Not a regular file, outside ``root``, replaced since it was checked,
            or over ``max_bytes``.
        OSError: It cannot be opened or read.
    """
    fd, status = open_regular(path, expected, root)
    with os.fdopen(fd, "rb") as handle:
        if status.st_size > max_bytes:
            raise RefusedFile(path, over_limit(max_bytes, f"{status.st_size}"))
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise RefusedFile(path, over_limit(max_bytes, "it grew while being read"))
    return data


def over_limit(max_bytes: int, size: str) -> str:
    """The reason a file over ``max_bytes`` is refused (``size``: its size, or what happened)."""
    return f"over {max_bytes} bytes ({size}); hint: raise max_bytes (--max-bytes)"


__all__ = [
    "BENEATH",
    "OPEN_FLAGS",
    "FileIdentity",
    "RefusedFile",
    "inside",
    "kind_of",
    "open_regular",
    "over_limit",
    "read_regular",
]
