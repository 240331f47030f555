"""The Postgres + pgvector engine: a table per store, HNSW (dense arm), full-text search (lexical).

The table (name given at open) holds ``id text``, ``embedding vector(dim)`` (HNSW index,
``vector_cosine_ops``), ``text``, ``metadata jsonb``, the ACL as ``tenant``, ``principals
text[]`` and ``sensitivity`` columns, and ``tsv``, a generated ``tsvector`` of the text
(English configuration, GIN index) that :meth:`PgVectorStore.lexical_query` ranks with
``ts_rank_cd``. A partial btree index on ``metadata -> field`` for each of
:data:`LOOKUP_FIELDS` (``key``, ``hash``, ``entry``) makes the batched lookups of Evermind's
own items (a memory by key, a cached embedding by hash) index scans. Several processes on one
database share the items: every write commits before it returns (``synchronous_commit`` is left
as the server has it: a bulk write is a few transactions per batch, so the commit's flush is
not what a load waits for). An upsert is one transaction: a binary ``COPY`` into a temporary
table (vectors and ``jsonb`` already in the server's binary input form), then one ``INSERT …
ON CONFLICT``. A memory store's embeddings go to ``<table>_emb_<dim>`` (``put_embeddings``),
whose HNSW index is built once, in the background (``build_embedding_index``).

Every filter operator and the ACL are translated to SQL (:func:`filter_sql`), so nothing runs
as a residual here; every value travels as a query parameter, identifiers through
``psycopg.sql.Identifier`` (and checked field names of ``Eq``/``In`` as quoted literals, for
the indexes). HNSW in pgvector 0.6 filters *after* the index scan: a query whose
filter or scope admits few rows can get fewer than ``k`` back from the index, so a short
result is re-run as an exact scan (index scans off). ``hnsw.ef_search`` is raised to at least
``2 k`` (at most 1000).

Native-only: psycopg 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg import sql

from evermind.errors import ConfigError, StorageError, StoreUnavailable
from evermind.vectorstore.filters import And, Eq, Exists, Filter, In, Not, Or, parse_filter
from evermind.vectorstore.port import (
    AccessScope,
    Acl,
    Hit,
    VectorItem,
    check_field,
    check_items,
    check_query,
    check_scope,
    unit,
)

__all__ = ["LOOKUP_FIELDS", "PgVectorStore", "filter_sql"]

T = TypeVar("T")

#: ``hnsw.ef_search`` bounds: pgvector's default and its maximum.
EF_MIN, EF_MAX = 40, 1000
#: ``maintenance_work_mem`` of an HNSW build (pgvector builds in memory while the graph fits).
EMBEDDING_INDEX_MEMORY = "1GB"
#: Ski rental for a bulk write into an embedding table whose HNSW index exists: each new row
#: pays pgvector's per-row insert, a rebuild costs about the table's size at the build's rate.
#: Measured at 10⁶ × 64 (docs/vectorstore.md "Postgres bulk writes at 10⁶", load 8–11): an
#: import of 10⁴ into the indexed table took 70 s against ~4.4 s unindexed (the insert: ~150
#: rows/s), the build 520 s (~1 900 rows/s), so the two cost the same at ~8 % of the table.
#: Once one store has written this share of the table's rows into the index since it last
#: found it built, its next bulk write drops the index first (``DROP INDEX CONCURRENTLY``:
#: readers are not blocked) and the next recall rebuilds it (at most about twice the cheaper
#: choice, whatever the import's size); meanwhile recall ranks in process.
EMBEDDING_REBUILD_SHARE = 0.08
#: ... and never for fewer rows than this. Only writes of at least EMBEDDING_BULK_ROWS rows
#: count (and ask the catalogue): a trickle of single writes keeps the index.
EMBEDDING_REBUILD_MIN_ROWS = 10_000
EMBEDDING_BULK_ROWS = 1000
#: Whether an index (by name) is built and valid (an interrupted CONCURRENTLY build is not).
_INDEX_STATE = (
    "SELECT i.indisvalid AND i.indisready FROM pg_index i JOIN pg_class c "
    "ON c.oid = i.indexrelid WHERE c.relname = %s AND pg_table_is_visible(c.oid)"
)
#: What psycopg's execute takes.
Query = sql.SQL | sql.Composed
_OPS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_COLUMNS = "id, text, metadata, tenant, principals, sensitivity"


_FIELD = sql.SQL("(metadata -> %s::text)")

#: Reads run unprepared: psycopg prepares a statement run 5 times,
#: and Postgres may then plan it once for any parameters (a generic plan). A generic plan sees
#: ``= ANY($1)`` with no values: it cannot hash the array (a bulk write's lookup of 10⁴ keys
#: then compares every row with every key: O(rows × keys); one batch took 58 s at 8·10⁴ memories)
#: nor weigh an index by the array's size. Planned with its values every time, it does both.
PREPARE_READS = False

#: Metadata fields every table indexes (a partial btree on ``metadata -> field``, rows that
#: have it): the fields Evermind's own items are fetched by in batches, so a lookup is an
#: index scan, not a scan of the table: a memory's ``key`` (the memory store's writes and
#: ``get``), a cached embedding's ``hash`` (the memory store's vector cache) and an L2 cache
#: ``entry``. Without them each bulk write's lookups read the whole table (860 memories/s
#: over 10⁵, docs/vectorstore.md "Bulk writes").
LOOKUP_FIELDS = ("key", "hash", "entry")


def filter_sql(node: Filter | None) -> tuple[Query, list[Any]]:
    """``node`` as a boolean SQL expression over ``metadata`` (never NULL) and its parameters.

    Values are parameters, in the order their ``%s`` appear; field names are parameters too,
    except in ``Eq``/``In``, where they are quoted literals (checked by ``check_field``) so
    that an expression index on the field can serve the comparison.
    """
    if node is None:
        return sql.SQL("TRUE"), []
    if isinstance(node, And | Or):
        if not node.parts:
            return sql.SQL("TRUE" if isinstance(node, And) else "FALSE"), []
        pieces, params = [], []
        for part in node.parts:
            piece, more = filter_sql(part)
            pieces.append(piece)
            params.extend(more)
        joiner = sql.SQL(" AND " if isinstance(node, And) else " OR ")
        return sql.SQL("({})").format(joiner.join(pieces)), params
    if isinstance(node, Not):
        piece, params = filter_sql(node.part)
        return sql.SQL("(NOT {})").format(piece), params
    field = check_field(node.field)
    if isinstance(node, Exists):
        return sql.SQL("(metadata ? %s::text)"), [field]
    if isinstance(node, Eq | In):
        values = [node.value] if isinstance(node, Eq) else list(node.values)
        if not values:
            return sql.SQL("FALSE"), []
        # The field name is a literal here, not a parameter, and the comparison is a bare
        # conjunct (no COALESCE): so the planner matches it to an expression index on
        # (metadata -> 'field') (LOOKUP_FIELDS), also in a prepared statement's generic plan.
        # "metadata ? field AND …" keeps it never NULL (an absent field is FALSE, also under
        # NOT) and implies the partial index's predicate. jsonb equality is type-strict
        # (true is not 1) and numeric across int and float.
        name = sql.Literal(field)
        if len(values) == 1:
            same = sql.SQL("(metadata ? {name} AND (metadata -> {name}) = %s::jsonb)")
            return same.format(name=name), [json.dumps(values[0])]
        # One = ANY over an array, not an OR per value: an index scan per value where the
        # field is indexed, else Postgres hashes the array (PG 14+): O(rows), not O(rows × keys).
        anyof = sql.SQL("(metadata ? {name} AND (metadata -> {name}) = ANY(%s::jsonb[]))")
        return anyof.format(name=name), [[json.dumps(v) for v in values]]
    bounds = node.bounds()
    numeric = not isinstance(bounds[0][1], str)
    # CASE keeps the comparison away from values of another type (no cast errors, no NULLs);
    # strings compare by code point (COLLATE "C" on UTF-8), as Python does.
    if numeric:
        value, rhs = _FIELD, sql.SQL("%s::jsonb")
    else:
        value, rhs = (
            sql.SQL('((metadata ->> %s::text) COLLATE "C")'),
            sql.SQL('(%s::text COLLATE "C")'),
        )
    tests = [sql.SQL("{} {} {}").format(value, sql.SQL(_OPS[op]), rhs) for op, _ in bounds]
    expr = sql.SQL("(CASE WHEN jsonb_typeof({}) = {} THEN {} ELSE FALSE END)").format(
        _FIELD, sql.SQL("'number'" if numeric else "'string'"), sql.SQL(" AND ").join(tests)
    )
    range_params: list[Any] = [field]
    for _, bound in bounds:
        range_params += [field, json.dumps(bound) if numeric else bound]
    return expr, range_params


def _scope_sql(scope: AccessScope) -> tuple[Query, list[Any]]:
    return (
        sql.SQL("(tenant = %s AND principals && %s::text[] AND sensitivity <= %s)"),
        [scope.tenant, sorted(scope.principals), scope.max_sensitivity],
    )


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(map(repr, map(float, vector))) + "]"


#: The column types a binary ``COPY`` is told. A ``vector`` and a ``jsonb`` travel as bytes
#: already in the server's binary input form (:func:`_vectors_binary`, :func:`_jsonb_binary`),
#: which psycopg passes through as it would a ``bytea``.
_RAW = "bytea"


def _vectors_binary(vectors: Sequence[Sequence[float]], dim: int) -> list[bytes]:
    """Each vector in pgvector's binary input form (``vector_recv``: int16 dimension, int16
    unused, the components as big-endian float4), converted in one numpy pass. Formatting
    text literals instead (``repr`` of every component, parsed back by the server) cost
    ~0.8 s a batch of 10⁴ 64-dimensional vectors in Python alone."""
    if not vectors:
        return []
    matrix = np.asarray(vectors, dtype=">f4").reshape(len(vectors), dim)
    head = struct.pack(">hh", dim, 0)
    return [head + row.tobytes() for row in matrix]


def _vector_of_binary(packed: bytes) -> array[float]:
    """A float32 vector from pgvector's binary form (:func:`_vectors_binary`)."""
    (dim,) = struct.unpack_from(">h", packed)
    vector = array("f")
    vector.frombytes(
        np.frombuffer(packed, dtype=">f4", count=dim, offset=4).astype("=f4").tobytes()
    )
    return vector


def _text_array(values: Sequence[str]) -> str:
    """A ``text[]`` literal of ``values`` (each quoted, ``"`` and ``\\`` escaped), cast by
    the server: dumping a Python list per row as a binary array cost more than the row."""
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"


def _jsonb_binary(document: str) -> bytes:
    """A JSON text in ``jsonb``'s binary input form (version 1, then the text)."""
    return b"\x01" + document.encode("utf-8")


class PgVectorStore:
    """A vector store in one Postgres table (pgvector's ``vector`` type, HNSW, full-text search).

    Open with :meth:`open`; one connection, used by one call at a time.
    """

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        table: str,
        dim: int,
        url: str = "",
        *,
        vector_index: bool = True,
        text_index: bool = True,
    ) -> None:
        self._vector_index = vector_index
        self._text_index = text_index
        self._conn = conn
        self._url = url  # to connect again after the server cut the connection
        self._table = sql.Identifier(table)
        self._name = table
        self.dim = dim
        self._lock = asyncio.Lock()
        self._embedding_dims: set[int] = set()  # embedding tables known to exist
        # Rows written into each embedding table's HNSW index since it was last found built.
        self._indexed_writes: dict[int, int] = {}
        self.rebuild_share = EMBEDDING_REBUILD_SHARE
        self.rebuild_min_rows = EMBEDDING_REBUILD_MIN_ROWS
        self.bulk_rows = EMBEDDING_BULK_ROWS

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        dim: int,
        table: str = "evermind_vectors",
        vector_index: bool = True,
        text_index: bool = True,
    ) -> PgVectorStore:
        """Connects to ``url``, creates the extension, table and indexes when missing.

        One catalogue query first: when the table exists with this dimension and every index
        it should have, nothing else runs (no DDL, no lock: a short-lived process such as a
        Claude Code hook opens an existing store in one round trip, and a role without
        ``CREATE`` can open it). Otherwise the ``CREATE … IF NOT EXISTS`` statements run in
        one transaction under an advisory lock.

        ``vector_index=False`` creates the table without its HNSW index, for a table no query
        ranks by its ``embedding`` column (the memory store's term signatures: ``MemoryStore``
        ranks in process): each write then skips pgvector's per-row HNSW insert, which bounds
        a load to ~400 rows/s (docs/vectorstore.md, "Bulk writes"). ``text_index=False`` leaves
        out the GIN index of ``tsv`` (a table no text query reads, such as the writer clocks').
        Queries stay correct without them (scans); indexes that already exist are kept.

        Raises:
            ConfigError: A bad table name or dim, or the table holds another dimension.
            StorageError: The database cannot be reached or refuses the schema.
        """
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 2000:
            raise ConfigError(f"pgvector: dim must be an int in 1..2000 (HNSW), got {dim!r}")
        check_field(table)
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        except psycopg.Error as err:
            raise StorageError(f"pgvector: cannot connect to the database: {err}") from err
        store = cls(conn, table, dim, url, vector_index=vector_index, text_index=text_index)
        try:
            await store._create()
        except BaseException:
            await conn.close()
            raise
        return store

    def _index_names(self) -> list[str]:
        """The indexes this table should have, by name (what ``_create`` makes)."""
        n = self._name
        names = [f"{n}_tenant", *(f"{n}_{field}"[:63] for field in LOOKUP_FIELDS)]
        if self._vector_index:
            names.append(f"{n}_hnsw")
        if self._text_index:
            names.append(f"{n}_tsv")
        return names

    async def _schema(self) -> tuple[str | None, set[str]]:
        """The table's ``embedding`` type (None: no such table or column) and index names."""
        cur = await self._conn.execute(
            "SELECT format_type(a.atttypid, a.atttypmod), ARRAY(SELECT c.relname::text "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = a.attrelid) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(quote_ident(%s)) AND a.attname = 'embedding'",
            [self._name],
        )
        row = await cur.fetchone()
        return (None, set()) if row is None else (str(row[0]), set(row[1]))

    def _check_dim(self, found: str | None) -> None:
        if found != f"vector({self.dim})":
            raise ConfigError(
                f"pgvector: table {self._name!r} holds {found or 'no embedding column'}, not "
                f"vector({self.dim}); open it with that dim or name another table"
            )

    async def _create(self) -> None:
        try:
            found, indexes = await self._schema()
        except psycopg.Error as err:
            raise StorageError(f"pgvector: cannot read table {self._name!r}: {err}") from err
        if found is not None and set(self._index_names()) <= indexes:
            self._check_dim(found)  # the schema is current: no DDL
            return
        await self._create_missing()

    async def _create_missing(self) -> None:
        t, n = self._table, self._name
        statements: list[Query] = [
            sql.SQL("CREATE EXTENSION IF NOT EXISTS vector"),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " id text PRIMARY KEY,"
                " embedding vector({}) NOT NULL,"
                " text text NOT NULL,"
                " metadata jsonb NOT NULL,"
                " tenant text NOT NULL,"
                " principals text[] NOT NULL,"
                " sensitivity integer NOT NULL,"
                " tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED)"
            ).format(t, sql.Literal(self.dim)),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (tenant)").format(
                sql.Identifier(f"{n}_tenant"), t
            ),
            *(
                sql.SQL(
                    "CREATE INDEX IF NOT EXISTS {} ON {} ((metadata -> {field})) "
                    "WHERE metadata ? {field}"
                ).format(sql.Identifier(f"{n}_{field}"[:63]), t, field=sql.Literal(field))
                for field in LOOKUP_FIELDS
            ),
        ]
        if self._vector_index:
            statements.append(
                sql.SQL(
                    "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)"
                ).format(sql.Identifier(f"{n}_hnsw"), t)
            )
        if self._text_index:
            statements.append(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (tsv)").format(
                    sql.Identifier(f"{n}_tsv"), t
                )
            )
        try:
            async with self._conn.transaction():
                # Two processes opening one new table at once: serialise the CREATEs.
                await self._conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [n])
                for statement in statements:
                    await self._conn.execute(statement)
                found, _ = await self._schema()
        except psycopg.Error as err:
            raise StorageError(f"pgvector: cannot create table {n!r}: {err}") from err
        self._check_dim(found)

    async def _connected(self) -> psycopg.AsyncConnection[Any]:
        """Under the lock: the connection, made again if the server cut the last one.

        Raises:
            StoreUnavailable: The server cannot be reached now.
        """
        if not (self._conn.closed or self._conn.broken) or not self._url:
            return self._conn
        try:
            self._conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
        except psycopg.Error as err:
            raise StoreUnavailable(
                f"pgvector: the database cannot be reached now: {_first_line(err)}; "
                "hint: retry later"
            ) from err
        return self._conn

    def _failed(self, what: str, err: psycopg.Error) -> StorageError:
        """The domain error for a failed statement: StoreUnavailable when the connection is
        gone (the next call connects again), else StorageError."""
        if isinstance(err, psycopg.OperationalError) or self._conn.closed or self._conn.broken:
            return StoreUnavailable(
                f"pgvector: {what}: the connection to the database failed "
                f"({_first_line(err)}); hint: retry later"
            )
        return StorageError(f"pgvector: {what}: {err}")

    async def _once_more(
        self, what: str, call: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]
    ) -> T:
        """Under the lock: ``call(connection)``; when the server had cut the connection (a
        restart, a failover), connects again and calls once more. Every statement here is
        idempotent (upserts replace, deletes and reads repeat), and a cut one was rolled back.

        Raises:
            StoreUnavailable: The server cannot be reached, or cut the new connection too.
            StorageError: The statement failed for another reason.
        """
        for attempt in (1, 2):
            conn = await self._connected()
            try:
                return await call(conn)
            except psycopg.Error as err:
                gone = conn.closed or conn.broken
                if attempt == 1 and gone and self._url:
                    continue
                raise self._failed(what, err) from err
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _run(self, statement: Query, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async def run(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            cur = await conn.execute(statement, params, prepare=PREPARE_READS)
            return await cur.fetchall() if cur.description else []

        async with self._lock:
            return await self._once_more("statement failed", run)

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[None]:
        """Holds Postgres's session advisory lock on ``name`` while the block runs.

        Every holder of ``name`` on this database, whatever its process or connection, waits
        for it, so a check-then-write inside the block is atomic across processes (the memory
        backend's compare-and-set: ``memory/vector_backend.py``). The statements inside run as
        usual (each committed on its own). Released at the end of the block, or by the server
        when the connection dies (a reconnect inside the block does not hold it again).
        """
        await self._run(sql.SQL("SELECT pg_advisory_lock(hashtextextended(%s, 0))"), [name])
        try:
            yield
        finally:
            await self._run(sql.SQL("SELECT pg_advisory_unlock(hashtextextended(%s, 0))"), [name])

    async def upsert(self, items: Sequence[VectorItem]) -> None:
        """Inserts or replaces ``items`` in one transaction (a bad item refuses the batch)."""
        checked = check_items(items, self.dim)
        vectors = _vectors_binary([i.vector for i in checked], self.dim)
        principals: dict[frozenset[str], str] = {}  # a batch's items mostly share one ACL
        rows = []
        for i, vector in zip(checked, vectors, strict=True):
            assert i.acl is not None  # check_items refuses items without one
            group = frozenset(i.acl.principals)  # the same object when it is one already
            held = principals.get(group)
            if held is None:
                held = principals[group] = _text_array(sorted(group))
            rows.append(
                (
                    i.id,
                    vector,
                    i.text,
                    _jsonb_binary(json.dumps(dict(i.metadata))),
                    i.acl.tenant,
                    held,
                    i.acl.sensitivity,
                )
            )

        async def write(conn: psycopg.AsyncConnection[Any]) -> None:
            await self._copy_upsert(conn, rows)

        async with self._lock:
            await self._once_more("upsert failed", write)

    async def _copy_upsert(
        self, conn: psycopg.AsyncConnection[Any], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        """One transaction: a binary COPY of ``rows`` into a temporary staging table, then
        one ``INSERT … SELECT … ON CONFLICT`` (the last row of an id wins); all or nothing."""
        stage = sql.Identifier(f"evermind_stage_{self._name}"[:63])
        upsert = sql.SQL(
            "INSERT INTO {} (id, embedding, text, metadata, tenant, principals, sensitivity) "
            "SELECT DISTINCT ON (id) id, embedding, text, metadata, tenant, principals::text[], "
            "sensitivity FROM {} ORDER BY id, ord DESC "
            "ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding, text = EXCLUDED.text, "
            "metadata = EXCLUDED.metadata, tenant = EXCLUDED.tenant, "
            "principals = EXCLUDED.principals, sensitivity = EXCLUDED.sensitivity"
        ).format(self._table, stage)
        async with conn.transaction():
            await conn.execute(
                sql.SQL(
                    "CREATE TEMP TABLE {} (ord integer, id text, embedding vector({}), "
                    "text text, metadata jsonb, tenant text, principals text, "
                    "sensitivity integer) ON COMMIT DROP"
                ).format(stage, sql.Literal(self.dim))
            )
            columns = "ord, id, embedding, text, metadata, tenant, principals, sensitivity"
            copy = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
                stage, sql.SQL(columns)
            )
            async with conn.cursor() as cur:
                async with cur.copy(copy) as feed:
                    feed.set_types(["int4", "text", _RAW, "text", _RAW, "text", "text", "int4"])
                    for ordinal, row in enumerate(rows):
                        await feed.write_row((ordinal, *row))
                await cur.execute(upsert)

    async def delete(self, ids: Sequence[str]) -> int:
        """Removes the items with these ids; returns how many existed."""
        if not ids:
            return 0
        rows = await self._run(
            sql.SQL("DELETE FROM {} WHERE id = ANY(%s::text[]) RETURNING id").format(self._table),
            [list(ids)],
        )
        return len(rows)

    def _where(self, filter: object, scope: AccessScope) -> tuple[Query, list[Any]]:
        acl, acl_params = _scope_sql(scope)
        cond, cond_params = filter_sql(parse_filter(filter))
        return sql.SQL("{} AND {}").format(acl, cond), [*acl_params, *cond_params]

    async def query(
        self,
        vector: Sequence[float],
        k: int,
        filter: object = None,
        scope: AccessScope | None = None,
    ) -> list[Hit]:
        """The ``k`` visible items most similar to ``vector`` that ``filter`` admits, best first."""
        checked = check_query(k, scope)
        q = _vector_literal(unit(vector, self.dim, "pgvector query"))
        where, params = self._where(filter, checked)
        statement = sql.SQL(
            "SELECT {}, 1 - (embedding <=> %s::vector) AS score FROM {} WHERE {} "
            "ORDER BY embedding <=> %s::vector LIMIT %s"
        ).format(sql.SQL(_COLUMNS), self._table, where)
        all_params = [q, *params, q, k]
        ef = str(min(EF_MAX, max(EF_MIN, 2 * k)))

        async def read(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            rows = await self._ordered(conn, statement, all_params, ef, exact=False)
            if len(rows) < k:  # the index's candidates ran out before the filter did
                rows = await self._ordered(conn, statement, all_params, ef, exact=True)
            return rows

        async with self._lock:
            rows = await self._once_more("query failed", read)
        hits = [_hit(row[:6], float(row[6])) for row in rows]
        return sorted(hits, key=lambda h: (-h.score, h.id))

    @staticmethod
    async def _ordered(
        conn: psycopg.AsyncConnection[Any],
        statement: Query,
        params: list[Any],
        ef: str,
        *,
        exact: bool,
    ) -> list[tuple[Any, ...]]:
        async with conn.transaction():
            await conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [ef])
            if exact:
                await conn.execute("SELECT set_config('enable_indexscan', 'off', true)")
            cur = await conn.execute(statement, params, prepare=PREPARE_READS)
            rows: list[tuple[Any, ...]] = await cur.fetchall()
            return rows

    async def lexical_query(
        self, text: str, k: int, filter: object = None, scope: AccessScope | None = None
    ) -> list[Hit]:
        """The ``k`` visible items whose text best matches ``text`` (web-search syntax), by
        ``ts_rank_cd``; items with no matching word are left out."""
        checked = check_query(k, scope)
        where, params = self._where(filter, checked)
        statement = sql.SQL(
            "SELECT {}, ts_rank_cd(tsv, websearch_to_tsquery('english', %s)) AS score FROM {} "
            "WHERE tsv @@ websearch_to_tsquery('english', %s) AND {} "
            "ORDER BY score DESC, id LIMIT %s"
        ).format(sql.SQL(_COLUMNS), self._table, where)
        rows = await self._run(statement, [text, text, *params, k])
        return [_hit(row[:6], float(row[6])) for row in rows]

    async def specific_text_query(
        self,
        text: str,
        k: int,
        *,
        share: float,
        population: object = None,
        admit: object = None,
        scope: AccessScope | None = None,
    ) -> list[Hit]:
        """The ``k`` items best matching any lexeme of ``text`` that share with it a *telling*
        lexeme: one held by at most ``share`` of the ``population`` (or by one item).

        ``text`` is cut into the English configuration's lexemes (stop words dropped, words
        stemmed, as the ``tsv`` column is); each lexeme's document frequency over
        ``population`` is counted through the GIN index. The items returned are of
        ``population`` and admitted by ``admit`` too (e.g. unexpired), ranked by
        ``ts_rank_cd`` against all the lexemes (OR), best first.

        Raises:
            ConfigError: A bad ``k``, ``share`` or scope.
        """
        checked = check_query(k, scope)
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ConfigError(f"pgvector: share must be in (0, 1], got {share!r}")
        among, among_params = self._where(population, checked)
        admitted, admitted_params = self._where(admit, checked)
        # A lexeme as a quoted tsquery operand: quotes and backslashes doubled, not normalised.
        # The one-row CTEs are MATERIALIZED: inlined, the planner may re-run the counts for
        # every row of the table (a nested loop's inner side): minutes at 10,000 memories.
        quoted = r"'''' || replace(replace(w, '\', '\\'), '''', '''''') || ''''"
        statement = sql.SQL(
            "WITH words AS (SELECT DISTINCT " + quoted + " AS q "
            "FROM unnest(tsvector_to_array(to_tsvector('english', %s))) AS w), "
            "held AS (SELECT q, (SELECT count(*) FROM {t} WHERE tsv @@ q::tsquery AND {among}) "
            "AS docs FROM words), "
            "total AS (SELECT count(*) AS n FROM {t} WHERE {among}), "
            "telling AS MATERIALIZED (SELECT string_agg(q, ' | ')::tsquery AS q "
            "FROM held, total WHERE held.docs BETWEEN 1 AND GREATEST(1, floor(total.n * %s))), "
            "every AS MATERIALIZED (SELECT string_agg(q, ' | ')::tsquery AS q FROM words) "
            "SELECT {columns}, ts_rank_cd(tsv, every.q) AS score FROM {t}, telling, every "
            "WHERE tsv @@ telling.q AND {among} AND {admitted} ORDER BY score DESC, id LIMIT %s"
        ).format(t=self._table, among=among, admitted=admitted, columns=sql.SQL(_COLUMNS))
        params = [text, *among_params, *among_params, share, *among_params, *admitted_params, k]
        rows = await self._run(statement, params)
        return [_hit(row[:6], float(row[6])) for row in rows]

    async def count(self, filter: object = None, scope: AccessScope | None = None) -> int:
        """How many items visible to ``scope`` the filter admits."""
        checked = check_scope(scope)
        where, params = self._where(filter, checked)
        rows = await self._run(
            sql.SQL("SELECT count(*) FROM {} WHERE {}").format(self._table, where), params
        )
        return int(rows[0][0])

    # ---------------------------------------------------------- the memory's embeddings

    def _embedding_table(self, dim: int) -> str:
        return f"{self._name}_emb_{dim}"[:63]

    async def _embedding_schema(self, dim: int) -> None:
        """Under the lock: creates ``<table>_emb_<dim>`` when missing (one catalogue query
        when it exists)."""
        if dim in self._embedding_dims:
            return
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 2000:
            raise ConfigError(f"pgvector: embedding dim must be an int in 1..2000, got {dim!r}")
        name = self._embedding_table(dim)

        async def create(conn: psycopg.AsyncConnection[Any]) -> None:
            cur = await conn.execute("SELECT to_regclass(quote_ident(%s)) IS NOT NULL", [name])
            row = await cur.fetchone()
            if row is not None and row[0]:
                return
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])
                await conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (tenant text NOT NULL, fingerprint text "
                        "NOT NULL, hash text NOT NULL, embedding vector({}) NOT NULL, "
                        "PRIMARY KEY (tenant, fingerprint, hash))"
                    ).format(sql.Identifier(name), sql.Literal(dim))
                )

        await self._once_more(f"cannot create table {name!r}", create)
        self._embedding_dims.add(dim)

    async def put_embeddings(
        self, tenant: str, fingerprint: str, vectors: Mapping[str, Sequence[float]]
    ) -> list[int]:
        """Stores ``vectors`` (content hash -> embedding) of ``tenant``'s embedder
        ``fingerprint`` in ``<table>_emb_<dim>`` (one table per dimension; a hash already
        there is kept: the same text has the same vector), in one ``COPY`` transaction.

        Returns the dimensions whose HNSW index this write dropped first (a bulk write past
        :data:`EMBEDDING_REBUILD_SHARE` of the table, see there): the caller's next recall
        rebuilds it."""
        dropped: list[int] = []
        by_dim: dict[int, list[tuple[str, Sequence[float]]]] = {}
        for digest, vector in vectors.items():
            by_dim.setdefault(len(vector), []).append((digest, vector))
        for dim, pairs in by_dim.items():
            table = sql.Identifier(self._embedding_table(dim))
            if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 2000:
                raise ConfigError(f"pgvector: embedding dim must be an int in 1..2000, got {dim!r}")
            packed = _vectors_binary([vector for _, vector in pairs], dim)
            rows = [(tenant, fingerprint, d, v) for (d, _), v in zip(pairs, packed, strict=True)]

            async def write(
                conn: psycopg.AsyncConnection[Any],
                table: sql.Identifier = table,
                rows: list[tuple[str, str, str, bytes]] = rows,
                dim: int = dim,
            ) -> None:
                stage = sql.Identifier(f"evermind_stage_emb_{dim}")
                async with conn.transaction():
                    await conn.execute(
                        sql.SQL(
                            "CREATE TEMP TABLE {} (tenant text, fingerprint text, hash text, "
                            "embedding vector({})) ON COMMIT DROP"
                        ).format(stage, sql.Literal(dim))
                    )
                    async with conn.cursor() as cur:
                        copy = sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(stage)
                        async with cur.copy(copy) as feed:
                            feed.set_types(["text", "text", "text", _RAW])
                            for row in rows:
                                await feed.write_row(row)
                        await cur.execute(
                            sql.SQL(
                                "INSERT INTO {} SELECT DISTINCT ON (tenant, fingerprint, hash) * "
                                "FROM {} ON CONFLICT DO NOTHING"
                            ).format(table, stage)
                        )

            async with self._lock:
                await self._embedding_schema(dim)
                if await self._drop_index_for(dim, len(rows)):
                    dropped.append(dim)
                await self._once_more("storing embeddings failed", write)
        return dropped

    async def _drop_index_for(self, dim: int, rows: int) -> bool:
        """Under the lock: before writing ``rows`` embeddings of ``dim``, drops the table's
        HNSW index when this store's writes into it since it was built reach
        :attr:`rebuild_share` of the table (and :attr:`rebuild_min_rows`); returns whether
        it did. Writes of fewer than :attr:`bulk_rows` rows are not counted."""
        if rows < self.bulk_rows:
            return False
        name = self._embedding_table(dim)
        state = await self._once_more(
            "reading the embedding index failed",
            lambda conn: _all(
                conn,
                sql.SQL(
                    "SELECT (" + _INDEX_STATE + "), (SELECT GREATEST(reltuples, 0)::bigint "
                    "FROM pg_class WHERE oid = to_regclass(quote_ident(%s)))"
                ),
                [f"{name}_hnsw"[:63], name],
            ),
        )
        valid, table_rows = state[0] if state else (None, 0)
        if not valid:
            self._indexed_writes[dim] = 0  # absent, or being built: nothing to pay yet
            return False
        written = self._indexed_writes.get(dim, 0) + rows
        if written < max(self.rebuild_min_rows, self.rebuild_share * int(table_rows or 0)):
            self._indexed_writes[dim] = written
            return False
        index = sql.Identifier(f"{name}_hnsw"[:63])
        await self._once_more(
            "dropping the embedding index failed",
            lambda conn: conn.execute(
                sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(index)
            ),
        )
        self._indexed_writes[dim] = 0
        return True

    async def get_embeddings(
        self, tenant: str, fingerprint: str, hashes: Sequence[str]
    ) -> dict[str, Sequence[float]]:
        """The embeddings among ``hashes`` of ``tenant``'s embedder ``fingerprint`` in the
        embedding tables (``<table>_emb_<dim>``, whatever the dimension): content hash ->
        float32 vector. One primary-key lookup per table, the vectors in pgvector's binary
        form (``vector_send``), so nothing is formatted or parsed as text."""
        wanted = list(dict.fromkeys(hashes))
        if not wanted:
            return {}
        pattern = self._embedding_table(0)[:-1].replace("_", "\\_") + "%"
        found: dict[str, Sequence[float]] = {}
        async with self._lock:
            tables = await self._once_more(
                "reading embeddings failed",
                lambda conn: _all(
                    conn,
                    sql.SQL(
                        "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' "
                        "AND c.relname LIKE %s AND pg_table_is_visible(c.oid)"
                    ),
                    [pattern],
                ),
            )
            for (name,) in tables:
                suffix = str(name).rsplit("_", 1)[-1]
                if not suffix.isdigit() or self._embedding_table(int(suffix)) != name:
                    continue  # another table whose name starts the same
                statement: Query = sql.SQL(
                    "SELECT hash, vector_send(embedding) FROM {} WHERE tenant = %s "
                    "AND fingerprint = %s AND hash = ANY(%s::text[])"
                ).format(sql.Identifier(str(name)))

                async def read(
                    conn: psycopg.AsyncConnection[Any], statement: Query = statement
                ) -> list[tuple[Any, ...]]:
                    return await _all(conn, statement, [tenant, fingerprint, wanted])

                rows = await self._once_more("reading embeddings failed", read)
                for digest, packed in rows:
                    found[str(digest)] = _vector_of_binary(bytes(packed))
        return found

    async def embedding_share(self, tenant: str, fingerprint: str, dim: int) -> tuple[int, int]:
        """How many rows of ``<table>_emb_<dim>`` are ``tenant``'s of ``fingerprint``, and how
        many rows it holds in all (Postgres's estimate: ``pg_class.reltuples``)."""
        name = self._embedding_table(dim)
        async with self._lock:
            await self._embedding_schema(dim)
            ours = await self._once_more(
                "counting embeddings failed",
                lambda conn: _one(
                    conn,
                    sql.SQL(
                        "SELECT count(*) FROM {} WHERE tenant = %s AND fingerprint = %s"
                    ).format(sql.Identifier(name)),
                    [tenant, fingerprint],
                ),
            )
            every = await self._once_more(
                "counting embeddings failed",
                lambda conn: _one(
                    conn,
                    sql.SQL(
                        "SELECT GREATEST(reltuples, 0)::bigint FROM pg_class "
                        "WHERE oid = to_regclass(quote_ident(%s))"
                    ),
                    [name],
                ),
            )
        return int(ours or 0), max(int(ours or 0), int(every or 0))

    async def embeddings_missing(
        self, tenant: str, fingerprint: str, dim: int, hashes: Sequence[str]
    ) -> int:
        """How many of ``hashes`` have no row of ``tenant``'s ``fingerprint`` in
        ``<table>_emb_<dim>`` (vectors cached before the table existed, say)."""
        if not hashes:
            return 0
        name = sql.Identifier(self._embedding_table(dim))
        statement = sql.SQL(
            "SELECT count(*) FROM unnest(%s::text[]) AS h(hash) WHERE NOT EXISTS "
            "(SELECT 1 FROM {} e WHERE e.tenant = %s AND e.fingerprint = %s AND e.hash = h.hash)"
        ).format(name)
        async with self._lock:
            await self._embedding_schema(dim)
            missing = await self._once_more(
                "counting embeddings failed",
                lambda conn: _one(conn, statement, [list(hashes), tenant, fingerprint]),
            )
        return int(missing or 0)

    async def embedding_index_ready(self, dim: int) -> bool:
        """Whether ``<table>_emb_<dim>`` has its HNSW index, built and valid."""
        name = self._embedding_table(dim)
        found = await self._run(sql.SQL(_INDEX_STATE), [f"{name}_hnsw"[:63]])
        return bool(found and found[0][0])

    async def build_embedding_index(
        self, dim: int, *, wait: bool = False, maintenance_work_mem: str = EMBEDDING_INDEX_MEMORY
    ) -> bool:
        """Builds the HNSW index of ``<table>_emb_<dim>`` (cosine) unless it exists, on a
        connection of its own (``CREATE INDEX CONCURRENTLY``: writers are not blocked, and this
        store's connection stays free) with ``maintenance_work_mem`` raised. One builder per
        database: a process that finds another building (an advisory lock) returns False at
        once, or with ``wait`` waits for that build; True when the index is ready. An index
        a dead build left invalid is dropped and built again.

        Raises:
            StorageError: The database refused the build.
        """
        if await self.embedding_index_ready(dim):
            return True
        name = self._embedding_table(dim)
        index = sql.Identifier(f"{name}_hnsw"[:63])
        try:
            async with await psycopg.AsyncConnection.connect(self._url, autocommit=True) as conn:
                if wait:
                    lock = "SELECT pg_advisory_lock(hashtextextended(%s, 0)), true"
                else:
                    lock = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
                cur = await conn.execute(lock, [f"build {name}"])
                row = await cur.fetchone()
                if row is None or not row[-1]:
                    return False  # another process is building it
                cur = await conn.execute(_INDEX_STATE, [f"{name}_hnsw"[:63]])
                state = await cur.fetchone()
                if state is not None and state[0]:
                    return True  # built by another process since the check above
                await conn.execute(
                    "SELECT set_config('maintenance_work_mem', %s, false)", [maintenance_work_mem]
                )
                await conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(index))
                await conn.execute(
                    sql.SQL(
                        "CREATE INDEX CONCURRENTLY {} ON {} "
                        "USING hnsw (embedding vector_cosine_ops)"
                    ).format(index, sql.Identifier(name))
                )
                # Fresh statistics: without them the planner takes a table loaded moments ago
                # for a few rows and sorts the tenant's rows (the primary key) over the index.
                await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(name)))
        except psycopg.Error as err:
            raise StorageError(
                f"pgvector: building the HNSW index of {name!r} failed: {err}"
            ) from err
        return await self.embedding_index_ready(dim)

    async def nearest_embeddings(
        self, tenant: str, fingerprint: str, vector: Sequence[float], n: int
    ) -> list[str] | None:
        """The content hashes of ``tenant``'s ``n`` embeddings (of ``fingerprint``) nearest to
        ``vector`` by cosine, through the HNSW index (``hnsw.ef_search`` = ``2 n``, at least
        40, at most 1000; pgvector filters the tenant after the index scan, so fewer than
        ``n`` may come back), best first; None when the index is not built and valid now (a
        bulk write dropped it, a rebuild is under way): an exact scan of the table instead
        would take seconds at 10⁶ rows."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= EF_MAX:
            raise ConfigError(f"pgvector: n must be an int in 1..{EF_MAX}, got {n!r}")
        table = self._embedding_table(len(vector))
        statement = sql.SQL(
            "SELECT hash FROM {} WHERE tenant = %s AND fingerprint = %s "
            "ORDER BY embedding <=> %s::vector LIMIT %s"
        ).format(sql.Identifier(table))
        params = [tenant, fingerprint, _vector_literal(vector), n]
        # One round trip sets ef_search and says whether the index is there (and stays: its
        # DROP INDEX CONCURRENTLY waits for this transaction).
        ready = sql.SQL(
            "SELECT set_config('hnsw.ef_search', %s, true), COALESCE((" + _INDEX_STATE + "), false)"
        )

        async def read(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]] | None:
            async with conn.transaction():
                ef = str(min(EF_MAX, max(EF_MIN, 2 * n)))  # room for other tenants' rows
                cur = await conn.execute(ready, [ef, f"{table}_hnsw"[:63]])
                state = await cur.fetchone()
                if state is None or not state[1]:
                    return None
                cur = await conn.execute(statement, params, prepare=PREPARE_READS)
                return await cur.fetchall()

        async with self._lock:
            rows = await self._once_more("nearest embeddings failed", read)
        return None if rows is None else [str(row[0]) for row in rows]

    async def drop(self) -> None:
        """Drops the table and its indexes (tests, and a user removing a store)."""
        await self._run(sql.SQL("DROP TABLE IF EXISTS {}").format(self._table), [])

    async def close(self) -> None:
        """Closes the connection."""
        await self._conn.close()


async def _all(
    conn: psycopg.AsyncConnection[Any], statement: Query, params: Sequence[Any]
) -> list[tuple[Any, ...]]:
    cur = await conn.execute(statement, params, prepare=PREPARE_READS)
    return await cur.fetchall()


async def _one(conn: psycopg.AsyncConnection[Any], statement: Query, params: Sequence[Any]) -> Any:
    """The first column of the first row of ``statement`` (None when no row)."""
    cur = await conn.execute(statement, params, prepare=PREPARE_READS)
    row = await cur.fetchone()
    return None if row is None else row[0]


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _hit(row: Sequence[Any], score: float) -> Hit:
    id_, text, metadata, tenant, principals, sensitivity = row
    return Hit(id_, score, text, dict(metadata), Acl(tenant, frozenset(principals), sensitivity))
