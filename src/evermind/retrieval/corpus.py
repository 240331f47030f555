"""Documents into the retriever's two arms: files parsed and chunked, embedded, indexed.

The ingest pipeline (:mod:`evermind.ingest`) syncs chunks into a ``MemoryStore``; the
retriever reads a :class:`~evermind.vectorstore.VectorStore` and a lexical arm instead. This
module reuses the same parsers, chunker and chunk keys (``<source>#<n>@<hash>``) and writes
each chunk to both, under one ACL per call::

    chunks = read_chunks(["docs/", "faq.html"], base=root)
    await index_chunks(chunks, store, embedder, acl, lexical=arm)

Metadata kept per item: ``source``, ``position``, ``line``, ``breadcrumb`` and every flat
field (str, int, float, bool) of the chunk's own metadata; nested ones are left out (a
vector store's metadata is flat). Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from evermind.ingest.chunker import Chunk, Chunker
from evermind.ingest.documents import ParseOptions
from evermind.ingest.files import read_source, select_files
from evermind.ingest.registry import PARSERS, ParserRegistry, decode
from evermind.memory.embedder import as_embedder
from evermind.retrieval.lexical import BM25Arm
from evermind.vectorstore.port import (
    FIELD_RE,
    MAX_SAFE_INT,
    Acl,
    MetaValue,
    VectorItem,
    VectorStore,
)

__all__ = ["chunk_item", "index_chunks", "read_chunks"]


def read_chunks(
    paths: Iterable[str | os.PathLike[str]],
    *,
    base: str | os.PathLike[str],
    chunker: Chunker | None = None,
    options: ParseOptions | None = None,
    registry: ParserRegistry | None = None,
) -> list[Chunk]:
    """The chunks of the files under ``paths``, in file then reading order.

    Source ids are paths relative to ``base``, as ``evermind ingest`` names them.

    Raises:
        InputError: A missing path, or a file no parser reads (the message names it).
    """
    registry = registry or PARSERS
    chunker = chunker or Chunker()
    options = options or ParseOptions()
    selection = select_files(paths, Path(base), registry)
    chunks: list[Chunk] = []
    for file in selection.files:
        text = decode(read_source(file), file.source)
        document = registry.get(file.parser)(text, file.source, options)
        chunks.extend(chunker.chunk(document))
    return chunks


def _flat(value: Any) -> MetaValue | None:
    if isinstance(value, bool | str | float):
        return value
    if isinstance(value, int) and abs(value) <= MAX_SAFE_INT:
        return value
    return None


def chunk_item(chunk: Chunk, vector: Sequence[float], acl: Acl) -> VectorItem:
    """The vector-store item of one chunk (id = its key, text = its content)."""
    meta: dict[str, MetaValue] = {}
    for key, value in chunk.meta.items():
        flat = _flat(value)
        if flat is not None and FIELD_RE.match(key):
            meta[key] = flat
    meta.update(
        source=chunk.source, position=chunk.position, line=chunk.line, breadcrumb=chunk.breadcrumb
    )
    return VectorItem(chunk.key, vector, chunk.content, meta, acl)


async def index_chunks(
    chunks: Sequence[Chunk],
    store: VectorStore,
    embedder: Any,
    acl: Acl,
    *,
    lexical: BM25Arm | None = None,
    batch: int = 64,
) -> int:
    """Embeds ``chunks`` and upserts them into ``store`` (and ``lexical``), ``batch`` at a time.

    Returns:
        How many items were written.
    """
    bound = as_embedder(embedder)
    written = 0
    for start in range(0, len(chunks), batch):
        part = chunks[start : start + batch]
        vectors = await bound.embed([c.content for c in part])
        items = [chunk_item(c, v, acl) for c, v in zip(part, vectors, strict=True)]
        await store.upsert(items)
        if lexical is not None:
            lexical.add(items)
        written += len(items)
    return written
