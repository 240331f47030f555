"""The schema of the SQLite memory file: its version and the migrations that reach it.

Read by the backend that writes the file (:mod:`evermind.memory.sqlite_backend`, which runs the
migrations) and by the hooks' read-only side index (:mod:`evermind.memory.hook_index`, which
refuses a file of another version). Standard library only.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

# Each entry migrates the schema from version i to i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS memories (
        namespace   TEXT NOT NULL,
        key         TEXT NOT NULL,
        content     TEXT NOT NULL,
        tags        TEXT NOT NULL,
        importance  REAL NOT NULL,
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        expires_at  REAL,
        archived    INTEGER NOT NULL DEFAULT 0,
        meta        TEXT NOT NULL,
        PRIMARY KEY (namespace, key)
    );
    CREATE INDEX IF NOT EXISTS memories_expiry ON memories (namespace, expires_at);
    CREATE TABLE IF NOT EXISTS namespaces (
        namespace TEXT PRIMARY KEY,
        version   INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS vectors (
        fingerprint  TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        dim          INTEGER NOT NULL,
        vector       BLOB NOT NULL,
        PRIMARY KEY (fingerprint, content_hash)
    );
    """,
)
