"""The compaction archive and the store file's rotated backups (native, standard library only).

The archive holds the original text of every compacted memory, durably and outside the memory
snapshot: a separate SQLite file beside the memory file, ``<memory file>.archive.sqlite``. A row
is keyed by ``(namespace, key, sha256 of the text)`` and also stores the stub written for it.
Rows are added with ``INSERT OR IGNORE`` and never updated, so no rewrite of the memory file and
no capacity eviction can lose an archived text; they are deleted only when their key is
forgotten (:meth:`Archive.forget`, called by ``evermind.memory.compaction.forget``).

A stub resolves by content hash, never by its text: compaction writes
``meta["compacted"]["sha256"]`` beside the stub (:func:`compacted_hash` reads it), and a stub
reads as the archived row of that hash, and only if the stub quotes that row's first line. Two
texts with one first line share a stub but never an original, and a stub line written by hand
(no link) or left behind by a forgotten memory resolves to nothing ("content lost").

:class:`StubResolver` is the one place a stub is read: what a compacted memory shows (its
original, the stub line kept beside it, or a "content lost" mark) for every reader — the MCP
tools over a ``MemoryStore`` and the hooks over :mod:`evermind.memory.hook_index`.

Each put commits with ``synchronous=FULL`` before it returns, so a compactor that writes the
stub only after :meth:`Archive.put` returned can crash anywhere and lose nothing.

:func:`rotate_backups` keeps ``<file>.bak.1`` … ``.bak.3`` (newest first) of a SQLite file,
copied with SQLite's online backup API (consistent even while other processes write).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from evermind.errors import ConfigError, StorageError
from evermind.memory.stubs import first_line, parse_stub

if TYPE_CHECKING:
    from evermind.memory.store import MemoryStore

ARCHIVE_SUFFIX = ".archive.sqlite"
#: How many rotated backups of a store file are kept.
BACKUPS = 3
LOST_NOTE = "content lost — verify before trusting"
#: The meta field compaction writes beside a stub: ``{"model_version", "sha256"}``.
COMPACTED_META = "compacted"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS archive (
    namespace TEXT NOT NULL, key TEXT NOT NULL, sha256 TEXT NOT NULL,
    content TEXT NOT NULL, stub TEXT NOT NULL, archived_at REAL NOT NULL,
    PRIMARY KEY (namespace, key, sha256)
);
"""


@dataclass(frozen=True)
class Resolved:
    """What a memory's content reads as: ``text`` (the original when a stub was resolved),
    ``stub`` (the stub line, or None when the content is no stub) and ``lost`` (a stub with no
    archived original)."""

    text: str
    stub: str | None = None
    lost: bool = False

    def display(self) -> str:
        """The content as a reader is shown it: the text, then a line naming the stub or loss."""
        if self.stub is None:
            return self.text
        if self.lost:
            return f"{self.stub}\n[{LOST_NOTE}: this compacted memory has no archived original]"
        return f"{self.text}\n[compacted as: {self.stub}]"


def archive_path(memory_file: str | os.PathLike[str]) -> Path:
    """The archive file of ``memory_file``."""
    return Path(f"{os.fspath(memory_file)}{ARCHIVE_SUFFIX}")


def text_hash(text: str) -> str:
    """The archive's content hash: sha256 of the UTF-8 text, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compacted_hash(meta: Mapping[str, Any] | None) -> str | None:
    """The content hash a stub's ``meta`` links it to, or None when it carries no link."""
    link = (meta or {}).get(COMPACTED_META)
    digest = link.get("sha256") if isinstance(link, Mapping) else None
    return digest if isinstance(digest, str) and digest else None


class Archive:
    """The merge-only archive beside one memory file (opened per use; cheap)."""

    def __init__(self, memory_file: str | os.PathLike[str]) -> None:
        self.path = archive_path(memory_file)

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        if not create and not self.path.is_file():
            return None
        try:
            conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as err:
            raise StorageError(f"compaction archive {self.path}: cannot open ({err})") from err
        return conn

    def put(self, namespace: str, key: str, text: str, stub: str) -> None:
        """Adds ``text`` (compacted to ``stub``) and commits before returning (kept if present).

        Raises:
            StorageError: The archive could not be written; the caller must not write the stub.
        """
        conn = self._connect(create=True)
        assert conn is not None
        try:
            with conn:
                conn.execute(
                    "INSERT OR IGNORE INTO archive VALUES (?, ?, ?, ?, ?, ?)",
                    (namespace, key, text_hash(text), text, stub, time.time()),
                )
        except sqlite3.Error as err:
            raise StorageError(f"compaction archive {self.path}: write failed ({err})") from err
        finally:
            conn.close()

    def original(self, namespace: str, key: str, sha256: str) -> str | None:
        """The archived text of ``key`` whose content hash is ``sha256``, or None."""
        conn = self._connect(create=False)
        if conn is None:
            return None
        try:
            row = conn.execute(
                "SELECT content FROM archive WHERE namespace = ? AND key = ? AND sha256 = ?",
                (namespace, key, sha256),
            ).fetchone()
        except sqlite3.Error as err:
            raise StorageError(f"compaction archive {self.path}: read failed ({err})") from err
        finally:
            conn.close()
        if row is None or text_hash(str(row[0])) != sha256:
            return None  # a row whose text no longer matches its hash is not an original
        return str(row[0])

    def forget(self, namespace: str, key: str) -> int:
        """Deletes every archived text of ``key`` (its memory was forgotten); returns how many.

        Raises:
            StorageError: The archive could not be written.
        """
        conn = self._connect(create=False)
        if conn is None:
            return 0
        try:
            with conn:
                cursor = conn.execute(
                    "DELETE FROM archive WHERE namespace = ? AND key = ?", (namespace, key)
                )
            return int(cursor.rowcount)
        except sqlite3.Error as err:
            raise StorageError(f"compaction archive {self.path}: delete failed ({err})") from err
        finally:
            conn.close()

    def count(self, namespace: str) -> int:
        """How many texts of ``namespace`` are archived."""
        conn = self._connect(create=False)
        if conn is None:
            return 0
        try:
            return int(
                conn.execute(
                    "SELECT COUNT(*) FROM archive WHERE namespace = ?", (namespace,)
                ).fetchone()[0]
            )
        finally:
            conn.close()

    def resolve(
        self, namespace: str, key: str, content: str, meta: Mapping[str, Any] | None
    ) -> Resolved:
        """``content`` as read: a stub becomes the archived original its ``meta`` links to.

        A stub with no link, a link to no archived text, or a link to a text whose first line
        the stub does not quote reads as lost.
        """
        stub = parse_stub(content)
        if stub is None:
            return Resolved(content)
        digest = compacted_hash(meta)
        try:
            original = None if digest is None else self.original(namespace, key, digest)
        except StorageError:
            original = None
        if original is None or not _quotes(stub.first_line, original):
            return Resolved(content, stub=content, lost=True)
        return Resolved(original, stub=content)


def _quotes(quoted: str, original: str) -> bool:
    """Whether a stub quoting ``quoted`` can stand for ``original`` (its first line)."""
    try:
        return first_line(original) == quoted
    except ConfigError:
        return False  # an archived text with no visible character has no stub


class Readable(Protocol):
    """A memory as some reader holds it: a dataclass (``MemoryRecord``, ``Hit``, ``HookMemory``)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def key(self) -> str: ...

    @property
    def content(self) -> str: ...

    @property
    def meta(self) -> Mapping[str, Any]: ...


ReadableT = TypeVar("ReadableT", bound=Readable)


class StubResolver:
    """What the memories of one namespace of one memory file read as, stubs resolved.

    Args:
        memory_file: The SQLite memory file whose archive holds the originals; None for a
            store that has no file (every stub then reads as lost).
        namespace: The store namespace (``tenant/namespace``).
    """

    def __init__(self, memory_file: str | os.PathLike[str] | None, namespace: str) -> None:
        self.archive = None if memory_file is None else Archive(memory_file)
        self.namespace = namespace

    @classmethod
    def of(cls, store: MemoryStore) -> StubResolver:
        """The resolver of ``store``'s namespace (its SQLite file's archive, if it has one)."""
        path = getattr(store.backend, "path", None)
        memory_file = path if isinstance(path, str) and path != ":memory:" else None
        return cls(memory_file, store.backend.namespace)

    def resolve(self, key: str, content: str, meta: Mapping[str, Any] | None) -> Resolved:
        """``content`` of ``key`` as read: a stub becomes the original ``meta`` links it to."""
        if parse_stub(content) is None:
            return Resolved(content)
        if self.archive is None:
            return Resolved(content, stub=content, lost=True)
        return self.archive.resolve(self.namespace, key, content, meta)

    def shown(self, memory: ReadableT) -> ReadableT:
        """``memory`` with a stub's content shown as its original plus the stub (or the loss)."""
        resolved = self.resolve(memory.key, memory.content, memory.meta)
        if resolved.stub is None:
            return memory
        return replace(memory, content=resolved.display())

    def readable(self, memories: Iterable[ReadableT]) -> list[ReadableT]:
        """``memories`` with stubs resolved to their originals; a lost stub is left out.

        For context pushed into a session unasked (the hooks): a one-line claim nobody can
        verify is dropped, while ``memory_get`` still shows it, marked.
        """
        out: list[ReadableT] = []
        for memory in memories:
            resolved = self.resolve(memory.key, memory.content, memory.meta)
            if resolved.stub is None:
                out.append(memory)
            elif not resolved.lost:
                out.append(replace(memory, content=resolved.display()))
        return out


def rotate_backups(path: str | os.PathLike[str], keep: int = BACKUPS) -> Path | None:
    """Copies the SQLite file ``path`` to ``<path>.bak.1``, shifting older copies up to ``keep``.

    Uses ``sqlite3.Connection.backup`` (a consistent copy, WAL contents included). Returns the
    new backup's path, or None when ``path`` does not exist yet.

    Raises:
        StorageError: The copy failed (the older backups are left as they were).
    """
    source_path = Path(path)
    if not source_path.is_file():
        return None
    fresh = Path(f"{source_path}.bak.new")
    try:
        source = sqlite3.connect(source_path, timeout=10.0)
        target = sqlite3.connect(fresh)
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
    except sqlite3.Error as err:
        fresh.unlink(missing_ok=True)
        raise StorageError(f"backup of {source_path} failed ({err}); nothing rotated") from err
    for index in range(keep - 1, 0, -1):
        older = Path(f"{source_path}.bak.{index}")
        if older.exists():
            os.replace(older, f"{source_path}.bak.{index + 1}")
    newest = Path(f"{source_path}.bak.1")
    os.replace(fresh, newest)
    return newest


__all__ = [
    "ARCHIVE_SUFFIX",
    "COMPACTED_META",
    "LOST_NOTE",
    "Archive",
    "Readable",
    "Resolved",
    "StubResolver",
    "archive_path",
    "compacted_hash",
    "rotate_backups",
    "text_hash",
]
