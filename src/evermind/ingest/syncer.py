"""One sync's working state and the diff of one source's chunks against its manifest.

:class:`Syncer` holds the store's records as the sync found them, the manifests read from
them and the running :class:`IngestReport`; :meth:`Syncer.apply` compares a parsed document's
chunks with the stored ones by position (unchanged, updated, added, deleted; see
:mod:`evermind.ingest.pipeline`) and writes the difference and the new manifest in one
transaction. Browser-safe: standard library only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evermind.ingest.chunker import Chunk, Chunker
from evermind.ingest.documents import Document, ParseOptions
from evermind.ingest.manifest import (
    Manifest,
    chunks_by_source,
    manifest_key,
    meta_hash,
    read_manifests,
)
from evermind.memory.records import MemoryRecord, normalise_tags, validate_content, validate_meta
from evermind.memory.store import MemoryStore

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
        skipped: ``(path, reason)`` of files left out by policy (binary, a link, not a
            regular file, too big, an unknown type): never read.
        failed: ``(path, reason)`` of files read whose parsing or storing failed; each fails
            alone, the run goes on (unless ``errors="raise"``), its stored chunks are kept.
        ok: Sources synced (written, or unchanged) without a failure.
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
    failed: list[tuple[str, str]] = field(default_factory=list)
    ok: int = 0
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
            "ok": self.ok,
            "failed": [list(item) for item in self.failed],
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


class Syncer:
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


__all__ = ["INGEST_TAG", "IngestProgress", "IngestReport", "OnProgress", "Syncer"]
