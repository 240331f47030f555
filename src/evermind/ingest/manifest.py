"""The ingest manifest: one archived record per source, in the memory store itself.

For every ingested source the namespace holds a record under ``ingest-manifest:<source>``,
written in the same transaction as the source's chunks, so chunks and manifest never
disagree. It is **archived**: recall, ``recent`` and ``count`` never see it, the store
never embeds it, and ``export``/``import_`` carry it along with the chunks. Its ``meta``:

- ``fingerprint``: SHA-256 of the source's bytes, the parse options and the chunker's
  settings (None for documents handed over already parsed); a source whose fingerprint is
  unchanged is skipped without being parsed again;
- ``chunks``: ``[key, meta_hash]`` per chunk in position order; a key is
  ``<source>#<position>@<content hash>``, so the diff by position tells unchanged, updated
  (new text or new metadata such as the line), added and deleted chunks apart;
- ``origin``: ``"file"`` (a path; a folder sync deletes it when the file is gone),
  ``"upload"`` (named bytes, ``sync_bytes``) or ``"document"`` (``sync_documents``);
  ``kind`` (the parser), ``title``, ``ingested_at`` (seconds since the epoch).

Browser-safe: standard library only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evermind.memory.records import MemoryRecord

#: Prefix of every manifest record's key.
MANIFEST_PREFIX = "ingest-manifest:"
#: Version of the manifest's shape.
MANIFEST_VERSION = 1


def manifest_key(source: str) -> str:
    """The key of ``source``'s manifest record."""
    return MANIFEST_PREFIX + source


def meta_hash(meta: Mapping[str, Any]) -> str:
    """A short hash of a chunk's metadata (canonical JSON), to see metadata-only changes."""
    canonical = json.dumps(meta, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Manifest:
    """What the store holds of one source.

    Attributes:
        source: The source id.
        kind: The parser that read it.
        origin: ``"file"``, ``"upload"`` or ``"document"``.
        fingerprint: Hash of bytes + options + chunker settings (None: not from bytes).
        chunks: ``(key, meta_hash)`` per chunk, in position order.
        title: The document's title.
        ingested_at: When this version was written, seconds since the epoch.
    """

    source: str
    kind: str
    origin: str
    fingerprint: str | None
    chunks: tuple[tuple[str, str], ...]
    title: str | None = None
    ingested_at: float = 0.0

    def chunk_keys(self) -> list[str]:
        """The chunk keys, in position order."""
        return [key for key, _ in self.chunks]

    def to_record(self) -> MemoryRecord:
        """The archived record the manifest is stored as."""
        meta = {
            "ingest": "manifest",
            "version": MANIFEST_VERSION,
            "source": self.source,
            "kind": self.kind,
            "origin": self.origin,
            "fingerprint": self.fingerprint,
            "chunks": [list(entry) for entry in self.chunks],
            "title": self.title,
            "ingested_at": self.ingested_at,
        }
        return MemoryRecord(
            key=manifest_key(self.source),
            content=f"ingest manifest of {self.source}: {len(self.chunks)} chunks",
            tags=("ingest-manifest",),
            importance=1.0,  # evicted last: losing it would orphan the chunks
            created_at=self.ingested_at,
            updated_at=self.ingested_at,
            archived=True,
            meta=meta,
        )

    @classmethod
    def from_record(cls, record: MemoryRecord) -> Manifest | None:
        """The manifest a record holds, or None when it is not a (readable) manifest."""
        meta = record.meta
        if not record.key.startswith(MANIFEST_PREFIX) or meta.get("ingest") != "manifest":
            return None
        try:
            chunks = tuple((str(k), str(h)) for k, h in meta.get("chunks", []))
            return cls(
                source=str(meta["source"]),
                kind=str(meta.get("kind", "")),
                origin=str(meta.get("origin", "document")),
                fingerprint=meta.get("fingerprint"),
                chunks=chunks,
                title=meta.get("title"),
                ingested_at=float(meta.get("ingested_at", record.updated_at)),
            )
        except (KeyError, TypeError, ValueError):
            return None  # a hand-edited record: the source is re-ingested from scratch


def read_manifests(records: Mapping[str, MemoryRecord]) -> dict[str, Manifest]:
    """Every manifest among ``records``, by source id."""
    out = {}
    for key, record in records.items():
        if key.startswith(MANIFEST_PREFIX):
            manifest = Manifest.from_record(record)
            if manifest is not None:
                out[manifest.source] = manifest
    return out


def chunks_by_source(records: Mapping[str, MemoryRecord]) -> dict[str, set[str]]:
    """The keys of every ingested chunk among ``records``, by the source they came from."""
    out: dict[str, set[str]] = {}
    for key, record in records.items():
        meta = record.meta
        if meta.get("ingest") == "chunk" and isinstance(meta.get("source"), str):
            out.setdefault(meta["source"], set()).add(key)
    return out


__all__ = [
    "MANIFEST_PREFIX",
    "Manifest",
    "chunks_by_source",
    "manifest_key",
    "meta_hash",
    "read_manifests",
]
