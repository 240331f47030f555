"""Vector stores behind one port: the in-process / SQLite store, Postgres + pgvector, Qdrant.

:func:`open_store` maps a URL to an engine (see docs/vectorstore.md):

- ``memory://``: in this process only (numpy exact scan);
- ``sqlite:///path``: the same, written through to a SQLite file (``sqlite:///rel.db`` is
  relative to the current directory, ``sqlite:////abs/path.db`` absolute);
- ``postgresql://…`` (or ``postgres://…``): a table in Postgres with pgvector;
- ``qdrant://host:port``: a Qdrant server; ``qdrant+local:///path`` (the same slash rule;
  ``qdrant+local://`` for memory only): qdrant-client's local mode in this process.

The engines import their drivers only when opened, so this package imports anywhere; the
port (:mod:`~evermind.vectorstore.port`) and the filter algebra
(:mod:`~evermind.vectorstore.filters`) are browser-safe.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from evermind.errors import ConfigError
from evermind.vectorstore.filters import (
    And,
    Eq,
    Exists,
    Filter,
    In,
    Not,
    Or,
    Range,
    evaluate,
    parse_filter,
)
from evermind.vectorstore.port import (
    AccessScope,
    Acl,
    Hit,
    ScopeRequired,
    VectorItem,
    VectorStore,
    visible,
)

__all__ = [
    "SCHEMES",
    "AccessScope",
    "Acl",
    "And",
    "Eq",
    "Exists",
    "Filter",
    "Hit",
    "In",
    "Not",
    "Or",
    "Range",
    "ScopeRequired",
    "VectorItem",
    "VectorStore",
    "evaluate",
    "open_store",
    "parse_filter",
    "visible",
]

SCHEMES = ("memory", "sqlite", "postgresql", "postgres", "qdrant", "qdrant+local")


async def open_store(url: str, *, dim: int, name: str = "evermind_vectors") -> VectorStore:
    """The engine ``url`` names, opened on a store of ``dim``-dimensional vectors.

    Args:
        url: One of the forms in the module docstring.
        dim: The vectors' dimension (a store that exists with another refuses to open).
        name: The table (Postgres) or collection (Qdrant) to use; ignored by the
            in-process engine.

    Raises:
        ConfigError: An unknown scheme (the message names it and the known ones), a
            malformed URL, or a store of another dimension.
        StorageError: The engine cannot be reached.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    # As for SQLAlchemy (and `evermind ingest --store`): sqlite:///x is x, sqlite:////x is /x.
    path = unquote(parts.path)[1:] if parts.path.startswith("/") else unquote(parts.path)
    if scheme == "memory":
        from evermind.vectorstore.inprocess import InProcessStore

        return InProcessStore(dim)
    if scheme == "sqlite":
        if not path:
            raise ConfigError(f"vector store: {url!r} names no file; expected sqlite:///path/to.db")
        from evermind.vectorstore.inprocess import InProcessStore

        return InProcessStore(dim, Path(path))
    if scheme in ("postgresql", "postgres"):
        from evermind.vectorstore.pgvector import PgVectorStore

        return await PgVectorStore.open(url, dim=dim, table=name)
    if scheme == "qdrant":
        if not parts.hostname:
            raise ConfigError(f"vector store: {url!r} names no host; expected qdrant://host:port")
        from evermind.vectorstore.qdrant import QdrantStore

        return await QdrantStore.open(
            dim=dim, collection=name, host=parts.hostname, port=parts.port or 6333
        )
    if scheme == "qdrant+local":
        from evermind.vectorstore.qdrant import QdrantStore

        local = path if path not in ("", ":memory:") else None
        return await QdrantStore.open(dim=dim, collection=name, path=local)
    raise ConfigError(
        f"vector store: unknown URL scheme {parts.scheme!r} in {url!r}; expected one of "
        "memory://, sqlite:///path, postgresql://…, qdrant://host:port, qdrant+local:///path",
        code="unknown_store_scheme",
    )
