"""Vector stores behind one port: the in-process / SQLite store, Postgres + pgvector, Qdrant.

:func:`open_store` maps a URL to an engine (see docs/vectorstore.md):

- ``memory://``: in this process only (numpy exact scan);
- ``sqlite:///path``: the same, written through to a SQLite file (``sqlite:///rel.db`` is
  relative to the current directory, ``sqlite:////abs/path.db`` absolute);
- ``postgresql://…`` (or ``postgres://…``): a table in Postgres with pgvector;
- ``qdrant://host:port``: a Qdrant server; ``qdrant+local:///path`` (the same slash rule;
  ``qdrant+local://`` for memory only): qdrant-client's local mode in this process;
- ``pinecone+https://INDEX_HOST`` (``+http`` for Pinecone Local): a REST dialect
  (:mod:`~evermind.vectorstore.rest`), the port's ``name`` its namespace.

:data:`ENGINES` is the one list of these schemes: ``open_store`` and ``--store``'s check
(:mod:`~evermind.vectorstore.shared`, :data:`STORE_SCHEMES`) both read it.

The engines import their drivers only when opened, so this package imports anywhere; the
port (:mod:`~evermind.vectorstore.port`) and the filter algebra
(:mod:`~evermind.vectorstore.filters`) are browser-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
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
from evermind.vectorstore.rest import DIALECTS, open_rest_store

__all__ = [
    "ENGINES",
    "SCHEMES",
    "STORE_SCHEMES",
    "AccessScope",
    "Acl",
    "And",
    "Engine",
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
    "redacted",
    "visible",
]


@dataclass(frozen=True)
class Engine:
    """One URL scheme :func:`open_store` takes.

    Attributes:
        scheme: The URL's scheme (lower case).
        form: The URL form errors and docs show.
        store_flag: Whether ``--store`` (a runtime's memory and L2 cache) takes it: the engines
            several processes share with read-after-write consistency, and ``memory://``.
    """

    scheme: str
    form: str
    store_flag: bool


#: Every scheme :func:`open_store` takes, in the order errors list them (the one list).
ENGINES = (
    Engine("memory", "memory://", True),
    Engine("sqlite", "sqlite:///path", False),
    Engine("postgresql", "postgresql://…", True),
    Engine("postgres", "postgres://…", True),
    Engine("qdrant", "qdrant://host:port", True),
    Engine("qdrant+local", "qdrant+local:///path", False),
    # Pinecone is eventually consistent: the writer clocks --store keeps need read-your-writes.
    *(
        Engine(f"{spec.name}+{transport}", f"{spec.name}+{transport}://host", False)
        for spec in DIALECTS.values()
        for transport in ("https", "http")
    ),
)
SCHEMES = tuple(e.scheme for e in ENGINES)
#: The schemes ``--store`` takes.
STORE_SCHEMES = tuple(e.scheme for e in ENGINES if e.store_flag)


async def open_store(
    url: str,
    *,
    dim: int,
    name: str = "evermind_vectors",
    vector_index: bool = True,
    text_index: bool = True,
) -> VectorStore:
    """The engine ``url`` names, opened on a store of ``dim``-dimensional vectors.

    Args:
        url: One of the forms in the module docstring.
        dim: The vectors' dimension (a store that exists with another refuses to open).
        name: The table (Postgres) or collection (Qdrant) to use; ignored by the
            in-process engine.
        vector_index: Postgres only: False creates a new table without its HNSW index (a
            table nobody ranks by its vectors, such as the memory store's: writes go ~10x
            faster); the other engines ignore it.
        text_index: Postgres only: False creates a new table without the GIN index of its
            text (a table no text query reads, such as the writer clocks'); the other
            engines ignore it.

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

        return await PgVectorStore.open(
            url, dim=dim, table=name, vector_index=vector_index, text_index=text_index
        )
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
    if scheme in SCHEMES:  # the REST dialects (the only schemes left)
        return await open_rest_store(url, dim=dim, name=name)
    forms = ", ".join(e.form for e in ENGINES if e.scheme != "postgres")
    raise ConfigError(
        f"vector store: unknown URL scheme {parts.scheme!r} in {redacted(url)!r}; expected one "
        f"of {forms}",
        code="unknown_store_scheme",
    )


def redacted(url: str) -> str:
    """``url`` without its userinfo (a password or key is never printed)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
