"""Opening a Postgres store whose schema is current runs no DDL (a real Postgres, pgserver).

A Claude Code hook opens the memory tables on every event; the ``CREATE … IF NOT EXISTS``
statements and their advisory lock ran each time. Now one catalogue query decides: a table
with its dimension and every index it should have is opened as it is. Proven with an event
trigger that refuses any DDL (``ddl_command_start`` fires for ``CREATE … IF NOT EXISTS`` too,
whether or not the object exists), and with a role that may only read the tables.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from evermind.errors import ConfigError, StorageError
from evermind.memory.hook_reader import open_hook_reader
from evermind.memory.shared_memory import shared_memory
from evermind.vectorstore import open_store

REFUSE_DDL = (
    "CREATE FUNCTION refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ "
    "BEGIN RAISE EXCEPTION 'DDL refused by the test: %', tg_tag; END $$",
    "CREATE EVENT TRIGGER refuse_ddl ON ddl_command_start EXECUTE FUNCTION refuse_ddl()",
)


def sql(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}:@{host}"))


def test_a_current_schema_opens_without_ddl_and_a_missing_index_is_made(database: str) -> None:
    async def main() -> None:
        async with shared_memory(database, None, tenant="acme", namespace="n") as store:
            await store.remember("editor", "Niamh edits in Neovim")
        plain = await open_store(database, dim=8, name="chunks", text_index=False)
        await plain.close()

        sql(database, *REFUSE_DDL)
        with pytest.raises(psycopg.Error, match="DDL refused by the test"):
            sql(database, "CREATE TABLE IF NOT EXISTS chunks (id text)")  # the trigger works
        # Current: the memory and clock tables, and the plain table as it was made.
        async with shared_memory(database, None, tenant="acme", namespace="n") as store:
            assert (await store.get("editor")) is not None
            assert [h.key for h in await store.recall("Neovim")] == ["editor"]
        again = await open_store(database, dim=8, name="chunks", text_index=False)
        await again.close()
        # Another dimension is refused on the fast path, without DDL.
        with pytest.raises(ConfigError, match=r"holds vector\(8\), not vector\(16\)"):
            await open_store(database, dim=16, name="chunks", text_index=False)
        # Not current (the GIN index is missing): the DDL runs, so the trigger refuses it ...
        with pytest.raises(StorageError, match="DDL refused by the test: CREATE EXTENSION"):
            await open_store(database, dim=8, name="chunks")
        sql(database, "DROP EVENT TRIGGER refuse_ddl")
        # ... and without the trigger it makes the index.
        made = await open_store(database, dim=8, name="chunks")
        await made.close()
        with psycopg.connect(database) as conn:
            names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        assert "chunks_tsv" in names and "chunks_hnsw" in names, names

    asyncio.run(main())


def test_a_role_that_may_only_read_opens_the_store_for_a_hook(database: str) -> None:
    async def main() -> None:
        async with shared_memory(database, None, tenant="acme", namespace="n") as store:
            await store.remember("editor", "Niamh edits in Neovim", ["pref"], 0.9)
            await store.remember("lunch", "Lunch is at noon on Fridays", [], 0.2)
        sql(
            database,
            "CREATE ROLE hook_reader LOGIN",
            "GRANT SELECT ON ALL TABLES IN SCHEMA public TO hook_reader",
        )
        reader_url = as_role(database, "hook_reader")
        async with open_hook_reader(
            reader_url, tenant="acme", namespace="n", file_namespace="acme/n"
        ) as reader:
            recalled = await reader.recall("which editor does Niamh use", 5)
            assert [m.key for m in recalled] == ["editor"]
            assert await reader.has("lunch") and not await reader.has("dinner")
            assert [m.key for m in await reader.digest(5)] == ["editor", "lunch"]
        # The role cannot write: proof that the read path above needed no privilege more.
        async with shared_memory(reader_url, None, tenant="acme", namespace="n") as store:
            with pytest.raises(StorageError, match="permission denied"):
                await store.remember("x", "y")

    asyncio.run(main())
