"""The Studio's Data → Memory RPC handlers: dropped files into the tab's memory store.

``memory_ingest`` parses and chunks files the Data panel holds with :mod:`evermind.ingest`
(the same parsers, chunker and manifest diff-sync as ``evermind ingest``) and writes the
chunks, with their source id and metadata, into a namespace of the tab's memory store
(:class:`~evermind.studio.tab_memory.TabMemory`). A file sent again is diff-synced: only
chunks whose text or metadata changed are rewritten, chunks its new version lacks are
deleted. ``memory_sources`` lists what the namespace holds by source, and
``memory_forget_source`` removes one source with all of its chunks.

Progress goes to the page as ``memory-ingest-progress`` events (``done`` of ``total``
chunks): every file is parsed and chunked first, so the total is known before anything is
written (a file that no parser reads, or a malformed CSV, stops the call before any write).
With a model, the chunks are embedded in batches before the write (the store's vector cache
keeps them, so the sync embeds nothing twice) and each batch is a progress step (``stage``
``"embed"``); without one, each file written is (``stage`` ``"write"``). The embedding is the
cancellable ``ingest`` operation (``operation_cancel``): a cancel stops it before its next
batch and the call fails with ``Cancelled`` before anything is written, so a send writes all
of its chunks or none; the write itself is not cancellable. The store is
:mod:`~evermind.studio.memory_api`'s (one ``TabMemory`` per session, so the Memory panel
recalls what was sent). Registered on this module's ``router``, which
:mod:`evermind.studio.api` merges. Browser-safe.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Sequence
from typing import Any

from evermind import ingest
from evermind.errors import InputError
from evermind.ingest import Chunker, IngestProgress, ParseOptions
from evermind.memory.records import validate_content
from evermind.studio import operations
from evermind.studio.memory_api import tab_memory
from evermind.studio.rpc import Router, emit
from evermind.studio.tab_memory import check_namespace

router = Router()
handler = router.handler

#: Tags every chunk sent from the Data panel carries (besides ``ingest``).
STUDIO_TAGS = ("studio-data",)
#: Chunk texts embedded per progress step when a model embeds.
EMBED_BATCH = 16
#: Largest file (decoded bytes) ``memory_ingest`` takes.
MAX_FILE_BYTES = 32_000_000


def _files(files: object) -> list[tuple[str, bytes]]:
    """``[(name, bytes)]`` of the call's ``files`` (``{name, data_b64}`` or ``{name, text}``)."""
    if not isinstance(files, list) or not files:
        raise InputError(
            f"memory_ingest: files must be a non-empty list, got {files!r:.80}; "
            "hint: [{'name': 'notes.md', 'data_b64': '…'}]"
        )
    out: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for index, item in enumerate(files):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"memory_ingest: files[{index}] has no name; hint: {{'name': …}}")
        if name in seen:
            raise InputError(f"memory_ingest: {name!r} is given twice; send each file once")
        seen.add(name)
        text, data_b64 = item.get("text"), item.get("data_b64")
        if (text is None) == (data_b64 is None):
            raise InputError(f"memory_ingest: {name}: give exactly one of text= or data_b64=")
        if text is not None:
            if not isinstance(text, str):
                raise InputError(f"memory_ingest: {name}: text must be a string")
            data = text.encode("utf-8")
        else:
            try:
                data = base64.b64decode(str(data_b64), validate=True)
            except (binascii.Error, ValueError) as err:
                raise InputError(f"memory_ingest: {name}: data_b64 is not base64: {err}") from err
        if len(data) > MAX_FILE_BYTES:
            raise InputError(
                f"memory_ingest: {name} is {len(data):,} bytes, over the limit of "
                f"{MAX_FILE_BYTES:,}; hint: split it, or ingest it natively (evermind ingest)"
            )
        out.append((name, data))
    return out


def _chunk_texts(items: Sequence[tuple[str, bytes]], chunker: Chunker) -> list[list[str]]:
    """Every file's chunk texts, as the sync will cut them (a bad file raises here)."""
    options = ParseOptions()
    out = []
    for name, data in items:
        _, parse = ingest.PARSERS.for_file(name)
        document = parse(ingest.decode(data, name), name, options)
        out.append([validate_content(c.content) for c in chunker.chunk(document)])
    return out


@handler
async def memory_ingest(
    files: list[dict[str, Any]], namespace: str | None = None
) -> dict[str, Any]:
    """Parses, chunks and diff-syncs ``files`` into the memory store's ``namespace``.

    Args:
        files: ``[{name, data_b64}]`` or ``[{name, text}]``; a name is the source id and its
            extension picks the parser (``.md``, ``.csv``, ``.txt``, ``.json`` …).
        namespace: The memory namespace (default ``"studio"``, the Memory panel's).

    Returns:
        The ingest report (``added``, ``updated``, ``deleted``, ``unchanged``, ``chunks``,
        ``embeds``, ``seconds`` …) with ``namespace`` and ``files``.

    Raises:
        InputError: A bad namespace or file entry, a file no parser reads, contents that
            do not parse; nothing is written then.
    """
    started = time.perf_counter()
    name = check_namespace(namespace)
    items = _files(files)
    chunker = Chunker()
    texts = _chunk_texts(items, chunker)
    total = sum(len(t) for t in texts)
    store = await tab_memory().store(name)
    cache = store.vector_cache
    stage = "write" if cache is None else "embed"
    emit("memory-ingest-progress", stage=stage, done=0, total=total, namespace=name, source=None)
    embedded_before = 0 if cache is None else cache.embedded_texts
    on_progress = None
    if cache is not None:
        done = 0
        with operations.operation("ingest") as op:
            for (source, _), chunk_texts in zip(items, texts, strict=True):
                for start in range(0, len(chunk_texts), EMBED_BATCH):
                    # The page's cancel call arrives only while this awaits (the CPU path
                    # embeds synchronously); nothing is written before the loop ends.
                    await asyncio.sleep(0)
                    op.check()
                    batch = chunk_texts[start : start + EMBED_BATCH]
                    await cache.vectors(batch)
                    done += len(batch)
                    emit(
                        "memory-ingest-progress",
                        stage="embed",
                        done=done,
                        total=total,
                        namespace=name,
                        source=source,
                    )
            op.check()
    else:

        def on_progress(progress: IngestProgress) -> None:
            emit(
                "memory-ingest-progress",
                stage="write",
                done=progress.chunks,
                total=total,
                namespace=name,
                source=progress.source,
            )

    report = await ingest.sync_bytes(
        store, items, chunker=chunker, tags=STUDIO_TAGS, on_progress=on_progress
    )
    emit(
        "memory-ingest-progress",
        stage="write",
        done=total,
        total=total,
        namespace=name,
        source=None,
    )
    # The report counts what the sync embedded; the batches before it embedded the rest.
    report.embeds = 0 if cache is None else cache.embedded_texts - embedded_before
    report.seconds = time.perf_counter() - started
    return {**report.to_dict(), "namespace": name, "files": [n for n, _ in items]}


@handler
async def memory_sources(namespace: str | None = None) -> dict[str, Any]:
    """The sources ingested into ``namespace``: id, parser, chunk count, title, when."""
    name = check_namespace(namespace)
    store = await tab_memory().store(name)
    return {
        "namespace": name,
        "sources": [
            {
                "source": m.source,
                "kind": m.kind,
                "origin": m.origin,
                "chunks": len(m.chunks),
                "title": m.title,
                "ingested_at": m.ingested_at,
            }
            for m in await ingest.sources(store)
        ],
    }


@handler
async def memory_forget_source(source: str, namespace: str | None = None) -> dict[str, Any]:
    """Removes ``source`` from ``namespace``: every chunk of it and its manifest.

    Raises:
        InputError: A bad namespace or source id.
    """
    name = check_namespace(namespace)
    store = await tab_memory().store(name)
    removed = await ingest.forget(store, source)
    return {"namespace": name, "source": source, "deleted": removed, "forgotten": removed > 0}


__all__ = [
    "EMBED_BATCH",
    "MAX_FILE_BYTES",
    "STUDIO_TAGS",
    "memory_forget_source",
    "memory_ingest",
    "memory_sources",
    "router",
]
