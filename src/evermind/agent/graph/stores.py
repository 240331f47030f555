"""``open_checkpointer``: the checkpointer a URL names (memory, SQLite, Postgres).

Browser-safe (standard library only): Postgres's module is imported only for its URLs.
"""

from __future__ import annotations

from evermind.agent.graph.checkpoint import Checkpointer, MemoryCheckpointer, SQLiteCheckpointer
from evermind.errors import ConfigError


def open_checkpointer(url: str) -> Checkpointer:
    """The checkpointer a URL names: ``memory://``, ``sqlite:///PATH`` (or a bare path),
    ``postgresql://...`` (native: needs psycopg).

    Raises:
        ConfigError: An unknown scheme.
    """
    if url == "memory://":
        return MemoryCheckpointer()
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from evermind.agent.graph.postgres import PostgresCheckpointer
        except ImportError as err:
            raise ConfigError(
                f"a Postgres checkpoint store needs psycopg ({err}); hint: "
                "pip install 'evermind-memory[store]'"
            ) from err
        return PostgresCheckpointer(url)
    if url.startswith("sqlite:///"):
        return SQLiteCheckpointer(url.removeprefix("sqlite:///"))
    if "://" in url:
        raise ConfigError(
            f"unknown checkpoint store {url!r}; expected sqlite:///PATH, postgresql://... or "
            "memory://"
        )
    return SQLiteCheckpointer(url)
