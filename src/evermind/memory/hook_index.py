"""The hooks' fast read path: an FTS5 side index of one namespace of the memory file.

A Claude Code hook is a fresh process per event, so it cannot afford what ``MemoryStore``
does on open (load every record and tokenize it into a BM25 index: ~0.9 s for 10,000
memories). :class:`HookIndex` keeps that work on disk instead: a side file next to the memory
file (``<memory file>.hook-<namespace digest>.fts``) holds an SQLite FTS5 table of each
memory's terms (:func:`evermind.text.terms`, the same terms the store's BM25 ranks, each hex
encoded so FTS5's tokenizer keeps it whole) and the namespace version it was built from. A
hook reads the namespace's version counter from the memory file; when it moved, only the
memories whose ``updated_at`` changed are re-tokenized. Ranking is FTS5's ``bm25()``
(k1 1.2, b 0.75, the store's defaults) divided by its best score, weighted by importance and
recency exactly as ``RecallOptions`` describes; content is always read from the memory file
itself, so a stale side index can never show a deleted or expired memory.

**The relevance floor** is :mod:`evermind.memory.prompt_recall`'s (shared by every store):
a memory must share with the prompt a term held by at most half of the namespace's memories
(or by one). Document frequencies are the side index's own (FTS5's ``fts5vocab``), so the
floor follows the store as it grows. ``SQLiteBackend.prompt_matches`` answers
``MemoryStore.recall_prompt`` from here too.

The memory file is opened read-only; it is never created or migrated here. This is memory's
public read path for callers that must not open a ``MemoryStore`` (the Claude Code hooks in
``evermind.mcp.hook``). The one other reader of its tables outside ``memory/`` is
``evermind.train.contrastive.load_texts`` (a memory file's live contents as training texts).
Native-only, standard library and ``evermind`` only (no numpy, no MCP SDK) so a hook starts
fast.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from evermind.errors import StorageError
from evermind.memory.prompt_recall import HookMemory, PromptMatch, most_holders, rank_matches
from evermind.memory.records import RecallOptions
from evermind.memory.sqlite_schema import SCHEMA_VERSION
from evermind.text import terms

#: Version of the side index's own layout; a different one is rebuilt.
INDEX_LAYOUT = 2

_SIDE_SCHEMA = """
CREATE TABLE IF NOT EXISTS layout (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS synced (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS docs (doc INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE,
                                 updated_at REAL NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(terms, tokenize = 'ascii');
"""


def _encode(term: str) -> str:
    return term.encode("utf-8").hex()


def side_path(memory_file: Path, namespace: str) -> Path:
    """The side index file of ``namespace`` next to ``memory_file``."""
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:12]
    return memory_file.with_name(f"{memory_file.name}.hook-{digest}.fts")


def open_memory_file(memory_file: Path) -> sqlite3.Connection:
    """Opens the memory file read-only.

    Raises:
        StorageError: It does not exist, is not a memory database, or has another schema.
    """
    if not memory_file.is_file():
        raise StorageError(f"memory file {memory_file} does not exist (nothing remembered yet)")
    try:
        conn = sqlite3.connect(f"{memory_file.as_uri()}?mode=ro", uri=True, timeout=2.0)
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    except sqlite3.Error as err:
        raise StorageError(f"memory file {memory_file}: not a memory database ({err})") from err
    if row is None or row[0] != SCHEMA_VERSION:
        conn.close()
        raise StorageError(
            f"memory file {memory_file}: schema version {row and row[0]}, this hook reads "
            f"version {SCHEMA_VERSION}"
        )
    return conn


class HookIndex:
    """Lexical recall and a digest over one namespace of the memory file, fast to open.

    Args:
        memory_file: The SQLite memory file (``evermind mcp``'s).
        namespace: The store namespace (``tenant/namespace``).
        options: Recall weighting (importance, recency, the candidate pool).
        clock: Seconds since the epoch.

    Raises:
        StorageError: The memory file is missing or unreadable.
    """

    def __init__(
        self,
        memory_file: Path,
        namespace: str,
        options: RecallOptions | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.memory_file = memory_file
        self.namespace = namespace
        self.options = options or RecallOptions()
        self.now = clock()
        self.main = open_memory_file(memory_file)
        self.side_file = side_path(memory_file, namespace)
        self.side: sqlite3.Connection | None = None

    def close(self) -> None:
        """Closes both files."""
        self.main.close()
        if self.side is not None:
            self.side.close()

    def __enter__(self) -> HookIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads

    def digest(self, limit: int) -> list[HookMemory]:
        """The ``limit`` most important live memories (newest first among equals)."""
        rows = self.main.execute(
            "SELECT key, content, tags, importance, updated_at, meta FROM memories "
            "WHERE namespace = ? AND archived = 0 AND (expires_at IS NULL OR expires_at > ?) "
            "ORDER BY importance DESC, updated_at DESC, key LIMIT ?",
            (self.namespace, self.now, limit),
        ).fetchall()
        return [_memory(row) for row in rows]

    def has(self, key: str) -> bool:
        """Whether a live (unexpired, unarchived) memory has the key ``key``."""
        row = self.main.execute(
            "SELECT 1 FROM memories WHERE namespace = ? AND key = ? AND archived = 0 "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (self.namespace, key, self.now),
        ).fetchone()
        return row is not None

    def recall(self, query: str, top_k: int) -> list[HookMemory]:
        """The live memories sharing terms with ``query`` above the relevance floor (module
        docstring), best first; empty when none clears it."""
        matches = self.matches(query, self.options.candidate_pool)
        return rank_matches(matches, top_k, self.options, self.now)

    def matches(self, query: str, pool: int) -> list[PromptMatch]:
        """The live memories among the ``pool`` best by ``bm25()`` that clear the relevance
        floor, each with its BM25 score (unranked: :func:`rank_matches` weighs them)."""
        wanted = list(dict.fromkeys(terms(query)))
        if not wanted:
            return []
        side = self._synced()
        match = " OR ".join(f'"{_encode(term)}"' for term in wanted)
        scored = side.execute(
            "SELECT docs.key, -bm25(fts), fts.rowid FROM fts JOIN docs ON docs.doc = fts.rowid "
            "WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?",
            (match, pool),
        ).fetchall()
        specific = _specific(side, {doc: key for key, _, doc in scored}, wanted)
        relevance = {key: float(score) for key, score, _ in scored if key in specific}
        if not relevance:
            return []
        return [(memory, relevance[memory.key]) for memory in self._live(relevance)]

    def _live(self, keys: Iterable[str]) -> list[HookMemory]:
        wanted = list(keys)
        marks = ",".join("?" * len(wanted))
        rows = self.main.execute(
            "SELECT key, content, tags, importance, updated_at, meta FROM memories "
            f"WHERE namespace = ? AND key IN ({marks}) AND archived = 0 "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (self.namespace, *wanted, self.now),
        ).fetchall()
        return [_memory(row) for row in rows]

    # ------------------------------------------------------------------ side index

    def _synced(self) -> sqlite3.Connection:
        """The side index, brought up to the memory file's current version first."""
        if self.side is None:
            self.side = self._open_side()
        side = self.side
        self.main.execute("BEGIN")
        try:
            row = self.main.execute(
                "SELECT version FROM namespaces WHERE namespace = ?", (self.namespace,)
            ).fetchone()
            version = 0 if row is None else int(row[0])
            synced = side.execute("SELECT version FROM synced").fetchone()
            if synced is not None and synced[0] == version:
                return side
            current = dict(
                self.main.execute(
                    "SELECT key, updated_at FROM memories WHERE namespace = ? AND archived = 0",
                    (self.namespace,),
                ).fetchall()
            )
            side.execute("BEGIN IMMEDIATE")
            try:
                self._apply(side, current)
                side.execute("DELETE FROM synced")
                side.execute("INSERT INTO synced (version) VALUES (?)", (version,))
                side.execute("COMMIT")
            except BaseException:
                side.execute("ROLLBACK")
                raise
        finally:
            self.main.execute("COMMIT")
        return side

    def _apply(self, side: sqlite3.Connection, current: dict[str, float]) -> None:
        """Re-indexes the memories whose ``updated_at`` changed; drops the removed ones."""
        indexed = {
            key: (updated, doc)
            for key, updated, doc in side.execute("SELECT key, updated_at, doc FROM docs")
        }
        stale = [key for key, (updated, _) in indexed.items() if current.get(key) != updated]
        for key in stale:
            side.execute("DELETE FROM fts WHERE rowid = ?", (indexed[key][1],))
            side.execute("DELETE FROM docs WHERE key = ?", (key,))
        fresh = {key for key, updated in current.items() if key not in indexed or key in stale}
        if not fresh:
            return
        rows: Iterable[Sequence[object]]
        if len(fresh) > len(current) // 2:
            rows = self.main.execute(
                "SELECT key, content, updated_at FROM memories WHERE namespace = ? "
                "AND archived = 0",
                (self.namespace,),
            )
        else:
            rows = self._contents(sorted(fresh))
        for key, content, updated in rows:
            if key not in fresh:
                continue
            encoded = " ".join(_encode(term) for term in terms(str(content)))
            cursor = side.execute("INSERT INTO fts (terms) VALUES (?)", (encoded,))
            side.execute(
                "INSERT INTO docs (key, updated_at, doc) VALUES (?, ?, ?)",
                (key, updated, cursor.lastrowid),
            )

    def _contents(self, keys: list[str]) -> list[Sequence[object]]:
        out: list[Sequence[object]] = []
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            out += self.main.execute(
                f"SELECT key, content, updated_at FROM memories WHERE namespace = ? "
                f"AND key IN ({marks})",
                (self.namespace, *chunk),
            ).fetchall()
        return out

    def _open_side(self) -> sqlite3.Connection:
        side = sqlite3.connect(self.side_file, timeout=10.0, isolation_level=None)
        side.execute("PRAGMA journal_mode = WAL")
        has_layout = side.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'layout'"
        ).fetchone()
        layout = side.execute("SELECT version FROM layout").fetchone() if has_layout else None
        if layout is None or layout[0] != INDEX_LAYOUT:
            # Another layout (or a fresh file): start over; the memory file is the truth.
            side.executescript(
                "BEGIN IMMEDIATE; DROP TABLE IF EXISTS layout; DROP TABLE IF EXISTS synced; "
                "DROP TABLE IF EXISTS docs; DROP TABLE IF EXISTS fts; COMMIT;"
            )
            side.executescript(_SIDE_SCHEMA)
            side.execute("INSERT INTO layout (version) VALUES (?)", (INDEX_LAYOUT,))
        return side


def _specific(side: sqlite3.Connection, docs: Mapping[int, str], wanted: list[str]) -> set[str]:
    """The keys of ``docs`` (side-index rowid -> key) that share with ``wanted`` a term held
    by at most half of the memories (:func:`most_holders`), or by one (the relevance floor)."""
    if not docs:
        return set()
    side.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.rows USING fts5vocab(main, fts, row)")
    side.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.instances USING fts5vocab(main, fts, instance)"
    )
    count = int(side.execute("SELECT count(*) FROM docs").fetchone()[0])
    most = most_holders(count)
    encoded = [_encode(term) for term in wanted]
    marks = ",".join("?" * len(encoded))
    telling = [
        term
        for term, held in side.execute(
            f"SELECT term, doc FROM temp.rows WHERE term IN ({marks})", encoded
        )
        if int(held) <= most
    ]
    if not telling:
        return set()
    term_marks, doc_marks = ",".join("?" * len(telling)), ",".join("?" * len(docs))
    shared = side.execute(
        f"SELECT DISTINCT doc FROM temp.instances WHERE term IN ({term_marks}) "
        f"AND doc IN ({doc_marks})",
        [*telling, *docs],
    )
    return {docs[int(doc)] for (doc,) in shared}


def _memory(row: Sequence[object]) -> HookMemory:
    key, content, tags, importance, updated_at, meta = row
    parsed = json.loads(str(tags)) if tags else []
    extra = json.loads(str(meta)) if meta else {}
    return HookMemory(
        str(key),
        str(content),
        tuple(str(tag) for tag in parsed),
        float(importance),  # type: ignore[arg-type]
        float(updated_at),  # type: ignore[arg-type]
        meta=extra if isinstance(extra, dict) else {},
    )


__all__ = ["HookIndex", "HookMemory", "open_memory_file", "side_path"]
