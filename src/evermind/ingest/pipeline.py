"""Diff-sync of sources into a ``MemoryStore``: ``sync`` (paths), ``sync_documents``, ``forget``.

Per source, one transaction (``MemoryStore.write``) puts the new and changed chunks, deletes
the stale ones and rewrites the source's manifest (:mod:`evermind.ingest.manifest`). A chunk
is compared with the one at its position in the manifest:

- same key (so same text) and same metadata: **unchanged**, not written;
- same position, new text or new metadata (say its line moved): **updated**;
- a new position: **added**; a position the source no longer has: **deleted**.

Only texts the store's vector cache has never seen are sent to the embedder (the cache is
keyed by the text's hash), so an unchanged or merely moved chunk costs no embedding; the
report's ``embeds`` counts the texts actually embedded. A folder sync also deletes the
sources that were ingested from that folder and are gone from it.
Browser-safe: standard library only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evermind.errors import EvermindError
from evermind.ingest.chunker import Chunk, Chunker
from evermind.ingest.documents import Document, ParseOptions, check_source_id
from evermind.ingest.files import MAX_FILE_BYTES, FileSource, select_files
from evermind.ingest.manifest import (
    Manifest,
    chunks_by_source,
    manifest_key,
    meta_hash,
    read_manifests,
)
from evermind.ingest.registry import PARSERS, ParserRegistry, decode
from evermind.memory.records import MemoryRecord, normalise_tags, validate_content, validate_meta
from evermind.memory.store import MemoryStore

logger = logging.getLogger(__name__)

#: The tag every ingested chunk carries (``recall(..., tags=["ingest"])`` finds only them).
INGEST_TAG = "ingest"


@dataclass
class IngestReport:
    """What a sync did. Chunk counts are per chunk; ``embeds`` counts embedded texts.

    Attributes:
        sources: Sources looked at (read, or skipped as unchanged by fingerprint).
        changed_sources: Sources whose chunks or manifest were written.
        added: Chunks at new positions.
        updated: Chunks whose text or metadata changed at their position.
        deleted: Chunks removed (positions gone, sources forgotten).
        unchanged: Chunks already stored as they are.
        embeds: Texts sent to the embedder (0 without one).
        seconds: Wall time of the sync.
        unit: What chunk sizes were counted in (``tokens`` or ``words``).
        skipped: ``(path, reason)`` of files left out.
        forgotten: Sources removed because their file is gone from a synced folder.
    """

    sources: int = 0
    changed_sources: list[str] = field(default_factory=list)
    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    embeds: int = 0
    seconds: float = 0.0
    unit: str = "words"
    skipped: list[tuple[str, str]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)

    @property
    def chunks(self) -> int:
        """Chunks the synced sources hold now."""
        return self.added + self.updated + self.unchanged

    def chunks_per_second(self) -> float:
        """Chunks the sync handled per second of wall time."""
        return self.chunks / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-serialisable data."""
        return {
            "sources": self.sources,
            "changed_sources": list(self.changed_sources),
            "added": self.added,
            "updated": self.updated,
            "deleted": self.deleted,
            "unchanged": self.unchanged,
            "chunks": self.chunks,
            "embeds": self.embeds,
            "seconds": round(self.seconds, 4),
            "chunks_per_second": round(self.chunks_per_second(), 1),
            "unit": self.unit,
            "skipped": [list(item) for item in self.skipped],
            "forgotten": list(self.forgotten),
        }


@dataclass(frozen=True)
class IngestProgress:
    """One source done: ``done`` of ``total`` sources; ``source`` is the one just handled."""

    done: int
    total: int
    source: str
    chunks: int


OnProgress = Callable[[IngestProgress], None]


class _Syncer:
    """One sync's state: the store's records at the start, the chunker, the running report."""

    def __init__(
        self, store: MemoryStore, chunker: Chunker, tags: Iterable[str], importance: float
    ) -> None:
        self.store = store
        self.chunker = chunker
        self.tags = normalise_tags([INGEST_TAG, *tags])
        self.importance = importance
        self.report = IngestReport(unit=chunker.unit)
        self.records: Mapping[str, MemoryRecord] = {}
        self.manifests: dict[str, Manifest] = {}
        self.by_source: dict[str, set[str]] = {}
        cache = store.vector_cache
        self._embedded_before = 0 if cache is None else cache.embedded_texts

    async def load(self) -> None:
        await self.store.refresh()
        self.records = self.store.snapshot().records
        self.manifests = read_manifests(self.records)
        self.by_source = chunks_by_source(self.records)

    def settings(self, options: ParseOptions) -> str:
        return json.dumps(
            {"chunker": self.chunker.settings(), "options": options.digest_fields()},
            sort_keys=True,
        )

    def unchanged(self, source: str, fingerprint: str) -> bool:
        """Whether ``source`` is stored from exactly these bytes and settings (then counted)."""
        old = self.manifests.get(source)
        if old is None or old.fingerprint != fingerprint:
            return False
        if not all(key in self.records for key in old.chunk_keys()):
            return False  # a chunk was evicted or forgotten by hand: re-ingest
        self.report.unchanged += len(old.chunks)
        return True

    async def apply(self, document: Document, origin: str, fingerprint: str | None) -> None:
        """Diffs ``document``'s chunks against the stored ones and writes the difference."""
        source = document.source
        chunks = self.chunker.chunk(document)
        old = self.manifests.get(source)
        old_at = {}
        if old is not None:
            for key, digest in old.chunks:
                position = _position(key, source)
                if position is not None:
                    old_at[position] = (key, digest)
        now = self.store.clock()
        puts: list[MemoryRecord] = []
        entries: list[tuple[str, str]] = []
        keep: set[str] = set()
        for chunk in chunks:
            meta = self._meta(chunk, document.kind)
            digest = meta_hash(meta)
            entries.append((chunk.key, digest))
            keep.add(chunk.key)
            before = old_at.get(chunk.position)
            if before == (chunk.key, digest) and chunk.key in self.records:
                self.report.unchanged += 1
                continue
            if before is None:
                self.report.added += 1
            else:
                self.report.updated += 1
            puts.append(self._record(chunk, meta, now))
        stale = {key for key, _ in (old.chunks if old else ())} | self.by_source.get(source, set())
        forget = sorted(key for key in stale - keep if key in self.records)
        self.report.deleted += sum(1 for p in old_at if p >= len(chunks))
        manifest = Manifest(
            source, document.kind, origin, fingerprint, tuple(entries), document.title, now
        )
        if puts or forget or old is None or old != _same_time(manifest, old):
            await self.store.write([*puts, manifest.to_record()], forget)
            self.report.changed_sources.append(source)
            self.manifests[source] = manifest
            self.by_source[source] = keep
            await self._reread()

    async def _reread(self) -> None:
        """Picks up the store's records after a write (one version check when only we wrote)."""
        await self.store.refresh()
        self.records = self.store.snapshot().records

    def _meta(self, chunk: Chunk, kind: str) -> dict[str, Any]:
        return validate_meta(
            {
                **chunk.meta,
                "ingest": "chunk",
                "source": chunk.source,
                "kind": kind,
                "position": chunk.position,
                "line": chunk.line,
                "breadcrumbs": list(chunk.breadcrumbs),
                "breadcrumb": chunk.breadcrumb,
                "units": chunk.units,
                "unit": self.chunker.unit,
                "oversize": chunk.oversize,
            }
        )

    def _record(self, chunk: Chunk, meta: dict[str, Any], now: float) -> MemoryRecord:
        return MemoryRecord(
            key=chunk.key,
            content=validate_content(chunk.content),
            tags=self.tags,
            importance=self.importance,
            created_at=now,
            updated_at=now,
            meta=meta,
        )

    async def forget(self, source: str) -> int:
        """Deletes ``source``'s chunks and manifest; returns how many chunks went."""
        old = self.manifests.get(source)
        keys = set(old.chunk_keys() if old else ()) | self.by_source.get(source, set())
        present = sorted(key for key in keys if key in self.records)
        if not present and old is None:
            return 0
        await self.store.write([], [*present, manifest_key(source)])
        self.report.deleted += len(present)
        self.manifests.pop(source, None)
        self.by_source.pop(source, None)
        await self._reread()
        return len(present)

    def finish(self, started: float) -> IngestReport:
        cache = self.store.vector_cache
        if cache is not None:
            self.report.embeds = cache.embedded_texts - self._embedded_before
        self.report.seconds = time.perf_counter() - started
        return self.report


def _position(key: str, source: str) -> int | None:
    """The position a chunk key of ``source`` names, or None for a foreign key."""
    prefix = source + "#"
    if not key.startswith(prefix):
        return None
    number = key[len(prefix) :].partition("@")[0]
    return int(number) if number.isdigit() else None


def _same_time(manifest: Manifest, old: Manifest) -> Manifest:
    """``manifest`` with ``old``'s time, to compare the two on content alone."""
    return Manifest(
        manifest.source,
        manifest.kind,
        manifest.origin,
        manifest.fingerprint,
        manifest.chunks,
        manifest.title,
        old.ingested_at,
    )


def _fingerprint(data: bytes, parser: str, settings: str) -> str:
    digest = hashlib.sha256(data)
    digest.update(b"\0" + parser.encode() + b"\0" + settings.encode())
    return digest.hexdigest()


async def sync(
    store: MemoryStore,
    paths: Iterable[str | os.PathLike[str]],
    *,
    base: str | os.PathLike[str] | None = None,
    chunker: Chunker | None = None,
    options: ParseOptions | None = None,
    parser: str | None = None,
    registry: ParserRegistry | None = None,
    tags: Iterable[str] = (),
    importance: float = 0.5,
    prune: bool = True,
    errors: Literal["raise", "skip"] = "raise",
    max_bytes: int = MAX_FILE_BYTES,
    on_progress: OnProgress | None = None,
) -> IngestReport:
    """Brings the store in line with files and folders: adds, updates and deletes chunks.

    Args:
        store: The memory store (its embedder embeds the new chunks).
        paths: Files and folders (walked; hidden files left out, binaries skipped).
        base: Source ids are paths relative to it (default: the current directory).
        chunker: How to cut (default: ``Chunker()``, 200 words with 30 of overlap).
        options: Fields/columns for the JSON and CSV parsers.
        parser: Parse every file with this registered parser instead of by extension.
        registry: The parsers (default: :data:`evermind.ingest.registry.PARSERS`).
        tags: Extra tags for every chunk (``ingest`` is always there).
        importance: Importance of every chunk.
        prune: Forget sources ingested from a synced folder whose file is gone.
        errors: ``"raise"`` stops at the first bad file (the sources before it are
            stored); ``"skip"`` reports it in ``skipped`` and goes on.
        max_bytes: Larger files are skipped.
        on_progress: Called after each source.

    Returns:
        The report.

    Raises:
        InputError: A missing path, a file no parser reads, bad contents (with ``errors=
            "raise"``); the message names the file and line.
    """
    started = time.perf_counter()
    registry = registry or PARSERS
    options = options or ParseOptions()
    if parser is not None:
        registry.get(parser)  # fail before reading anything
    root = Path(os.getcwd() if base is None else base)
    selection = select_files(paths, root, registry, parser, max_bytes)
    syncer = _Syncer(store, chunker or Chunker(), tags, importance)
    syncer.report.skipped.extend(selection.skipped)
    await syncer.load()
    settings = syncer.settings(options)
    total = len(selection.files)
    for done, file in enumerate(selection.files, start=1):
        try:
            await _sync_file(syncer, file, registry, options, settings)
        except EvermindError as err:
            if errors == "raise":
                raise
            syncer.report.skipped.append((file.source, str(err)))
        syncer.report.sources += 1
        if on_progress is not None:
            on_progress(IngestProgress(done, total, file.source, syncer.report.chunks))
    if prune and selection.folders:
        seen = {file.source for file in selection.files}
        for source, manifest in sorted(syncer.manifests.items()):
            gone = manifest.origin == "file" and source not in seen
            if gone and any(_under(source, folder) for folder in selection.folders):
                await syncer.forget(source)
                syncer.report.forgotten.append(source)
    return syncer.finish(started)


def _under(source: str, folder: str) -> bool:
    return folder == "." or source.startswith(folder.rstrip("/") + "/")


async def _sync_file(
    syncer: _Syncer,
    file: FileSource,
    registry: ParserRegistry,
    options: ParseOptions,
    settings: str,
) -> None:
    data = file.path.read_bytes()
    await _sync_bytes(syncer, file.source, data, file.parser, registry, options, settings, "file")


async def _sync_bytes(
    syncer: _Syncer,
    source: str,
    data: bytes,
    parser: str,
    registry: ParserRegistry,
    options: ParseOptions,
    settings: str,
    origin: str,
) -> None:
    fingerprint = _fingerprint(data, parser, settings)
    if syncer.unchanged(source, fingerprint):
        return
    document = registry.get(parser)(decode(data, source), source, options)
    await syncer.apply(document, origin, fingerprint)


async def sync_bytes(
    store: MemoryStore,
    files: Iterable[tuple[str, bytes | str]],
    *,
    chunker: Chunker | None = None,
    options: ParseOptions | None = None,
    parser: str | None = None,
    registry: ParserRegistry | None = None,
    tags: Iterable[str] = (),
    importance: float = 0.5,
    errors: Literal["raise", "skip"] = "raise",
    on_progress: OnProgress | None = None,
) -> IngestReport:
    """Named contents (files dropped in the Studio, uploads) into the store, diff-synced.

    Each ``(name, data)`` is one source: ``name`` is its source id and, by its extension,
    picks the parser (unless ``parser`` is given); ``data`` is UTF-8 bytes or text. Like
    :func:`sync`, an unchanged source is skipped without parsing and a changed one is
    diffed chunk by chunk; these sources are never pruned by a folder sync.

    Raises:
        InputError: A name no parser handles, bad contents (with ``errors="raise"``).
    """
    started = time.perf_counter()
    registry = registry or PARSERS
    options = options or ParseOptions()
    syncer = _Syncer(store, chunker or Chunker(), tags, importance)
    await syncer.load()
    settings = syncer.settings(options)
    items = list(files)
    for done, (name, data) in enumerate(items, start=1):
        try:
            source = check_source_id(name)
            kind = parser or registry.for_file(source)[0]
            raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
            await _sync_bytes(syncer, source, raw, kind, registry, options, settings, "upload")
        except EvermindError as err:
            if errors == "raise":
                raise
            syncer.report.skipped.append((str(name), str(err)))
        syncer.report.sources += 1
        if on_progress is not None:
            on_progress(IngestProgress(done, len(items), str(name), syncer.report.chunks))
    return syncer.finish(started)


async def sync_documents(
    store: MemoryStore,
    documents: Sequence[Document],
    *,
    chunker: Chunker | None = None,
    tags: Iterable[str] = (),
    importance: float = 0.5,
    on_progress: OnProgress | None = None,
) -> IngestReport:
    """Brings the store in line with already parsed documents (e.g. from ``parse_rows``).

    Each document replaces what the store holds of its source (diffed chunk by chunk as in
    :func:`sync`); other sources are left alone.
    """
    started = time.perf_counter()
    syncer = _Syncer(store, chunker or Chunker(), tags, importance)
    await syncer.load()
    for done, document in enumerate(documents, start=1):
        check_source_id(document.source)
        await syncer.apply(document, "document", None)
        syncer.report.sources += 1
        if on_progress is not None:
            on_progress(IngestProgress(done, len(documents), document.source, syncer.report.chunks))
    return syncer.finish(started)


async def forget(store: MemoryStore, source: str) -> int:
    """Removes ``source``: its chunks and its manifest. Returns how many chunks went."""
    syncer = _Syncer(store, Chunker(), (), 0.5)
    await syncer.load()
    return await syncer.forget(check_source_id(source))


async def sources(store: MemoryStore) -> list[Manifest]:
    """The manifests of every source the store holds, sorted by source id."""
    await store.refresh()
    return [m for _, m in sorted(read_manifests(store.snapshot().records).items())]


__all__ = [
    "INGEST_TAG",
    "IngestProgress",
    "IngestReport",
    "forget",
    "sources",
    "sync",
    "sync_bytes",
    "sync_documents",
]
