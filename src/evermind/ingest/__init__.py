"""Documents into memory: parse, chunk, and diff-sync sources into a ``MemoryStore``.

Public API::

    from evermind import ingest
    store = MemoryStore("memory.db", embedder=model)
    report = await ingest.sync(store, ["docs/", "tickets.csv"],
                               options=ingest.ParseOptions(columns=("subject", "body")))
    report.added, report.updated, report.deleted, report.unchanged, report.embeds
    await ingest.forget(store, "docs/old.md")          # a source and everything from it
    doc = ingest.parse_rows(rows, "query-42", columns=["title"])
    await ingest.sync_documents(store, [doc])
    await ingest.sync_bytes(store, [("faq.html", data)])  # dropped files, in the tab too

Modules: :mod:`~evermind.ingest.documents` (``Document``, ``Section``, ``ParseOptions``),
:mod:`~evermind.ingest.registry` (the parser registry), the parsers
(:mod:`~evermind.ingest.markdown`, :mod:`~evermind.ingest.htmltext`,
:mod:`~evermind.ingest.tabular`), :mod:`~evermind.ingest.chunker`,
:mod:`~evermind.ingest.manifest` (one archived record per source in the store),
:mod:`~evermind.ingest.files` (folder walking), :mod:`~evermind.ingest.syncer` (the diff of one
source against its manifest) and :mod:`~evermind.ingest.pipeline` (the sync functions);
:mod:`~evermind.ingest.passages` reads them back as cited passages for a question.
docs/ingest.md is the guide. Browser-safe: standard library and ``evermind`` only.
"""

from __future__ import annotations

from evermind.ingest.chunker import Chunk, Chunker
from evermind.ingest.documents import Document, ParseOptions, Section
from evermind.ingest.manifest import Manifest
from evermind.ingest.passages import NO_EVIDENCE, IngestedPassage, search_ingested
from evermind.ingest.pipeline import (
    INGEST_TAG,
    IngestProgress,
    IngestReport,
    forget,
    sources,
    sync,
    sync_bytes,
    sync_documents,
)
from evermind.ingest.registry import PARSERS, Parser, ParserRegistry, decode, register_parser
from evermind.ingest.tabular import parse_rows

__all__ = [
    "INGEST_TAG",
    "NO_EVIDENCE",
    "PARSERS",
    "Chunk",
    "Chunker",
    "Document",
    "IngestProgress",
    "IngestReport",
    "IngestedPassage",
    "Manifest",
    "ParseOptions",
    "Parser",
    "ParserRegistry",
    "Section",
    "decode",
    "forget",
    "parse_rows",
    "register_parser",
    "search_ingested",
    "sources",
    "sync",
    "sync_bytes",
    "sync_documents",
]
