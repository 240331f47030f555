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
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from evermind.errors import ConfigError, EvermindError, InputError
from evermind.ingest.chunker import Chunker
from evermind.ingest.documents import Document, ParseOptions, check_source_id
from evermind.ingest.files import MAX_FILE_BYTES, read_source, select_files, under
from evermind.ingest.manifest import Manifest, read_manifests
from evermind.ingest.registry import PARSERS, ParserRegistry, decode
from evermind.ingest.syncer import INGEST_TAG, IngestProgress, IngestReport, OnProgress, Syncer
from evermind.memory.store import MemoryStore
from evermind.safefiles import RefusedFile


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
    errors: Literal["raise", "skip"] = "skip",
    max_bytes: int = MAX_FILE_BYTES,
    follow_symlinks: bool = False,
    on_progress: OnProgress | None = None,
) -> IngestReport:
    """Brings the store in line with files and folders: adds, updates and deletes chunks.

    Reading never leaves the paths given (see :mod:`evermind.ingest.files`): symbolic links
    are reported, not followed (with ``follow_symlinks``, followed only when their target
    stays inside), and only regular files are opened.

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
        errors: ``"skip"`` (the default): a bad file fails alone, reported by its source
            id in ``failed`` (bad contents) or ``skipped`` (refused, missing), and the run
            goes on; ``"raise"`` stops at the first bad file (the sources before it are
            stored). A file found in a folder that is refused (a link, not a regular file,
            too big) is skipped either way; named explicitly, it is a bad file.
        max_bytes: Larger files are skipped (one that grows past it keeps its stored chunks).
        follow_symlinks: Follow symbolic links whose target resolves inside the folder (or,
            for a file named explicitly, inside its folder).
        on_progress: Called after each source.

    Returns:
        The report.

    Raises:
        InputError: With ``errors="raise"``: a missing path, a refused file named
            explicitly, bad contents; the message names the file and line.
        ConfigError: An unknown ``parser``, or ``max_bytes`` not a positive integer.
    """
    started = time.perf_counter()
    registry = registry or PARSERS
    options = options or ParseOptions()
    if parser is not None:
        registry.get(parser)  # fail before reading anything
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ConfigError(
            f"ingest: max_bytes (--max-bytes) must be a positive number of bytes, got {max_bytes!r}"
        )
    root = Path(os.getcwd() if base is None else base)
    selection = select_files(
        paths, root, registry, parser, max_bytes, follow_symlinks=follow_symlinks, errors=errors
    )
    syncer = Syncer(store, chunker or Chunker(), tags, importance)
    syncer.report.skipped.extend(selection.skipped)
    syncer.report.failed.extend(selection.failed)
    await syncer.load()
    settings = syncer.settings(options)
    total = len(selection.files)
    for done, file in enumerate(selection.files, start=1):
        try:
            data = read_source(file, max_bytes)
            await _sync_bytes(
                syncer, file.source, data, file.parser, registry, options, settings, "file"
            )
        except RefusedFile as err:  # replaced or grown since the walk: skipped like it
            if errors == "raise" and file.named:
                raise
            syncer.report.skipped.append((file.source, err.reason))
        except EvermindError as err:  # this file fails alone (its stored chunks are kept)
            if errors == "raise":
                raise
            syncer.report.failed.append((file.source, str(err)))
        else:
            syncer.report.ok += 1
        syncer.report.sources += 1
        if on_progress is not None:
            on_progress(IngestProgress(done, total, file.source, syncer.report.chunks))
    if prune and selection.folders:
        # Only a file that is gone loses its chunks: one skipped (too big, refused, bad)
        # still exists, and keeps what was stored of it.
        for source, manifest in sorted(syncer.manifests.items()):
            gone = manifest.origin == "file" and not selection.keeps(source)
            if gone and any(under(source, folder) for folder in selection.folders):
                await syncer.forget(source)
                syncer.report.forgotten.append(source)
    return syncer.finish(started)


async def _sync_bytes(
    syncer: Syncer,
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
    document = _parse(registry, parser, decode(data, source), source, options)
    try:
        await syncer.apply(document, origin, fingerprint)
    except RecursionError:
        raise InputError(f"{source}: {_TOO_DEEP}") from None


#: Why a file whose structure exhausts the parser's recursion was refused.
_TOO_DEEP = (
    "nested too deeply to read (Python's recursion limit); hint: flatten it, or leave it out"
)


def _parse(
    registry: ParserRegistry, parser: str, text: str, source: str, options: ParseOptions
) -> Document:
    """``text`` parsed; any failure of the parser is this source's error, never the run's."""
    read = registry.get(parser)
    try:
        return read(text, source, options)
    except EvermindError:
        raise
    except RecursionError:
        raise InputError(f"{source}: {_TOO_DEEP}") from None
    except Exception as err:  # a parser's own bug or limit fails its file alone
        raise InputError(
            f"{source}: the {parser} parser failed ({type(err).__name__}: {err})"
        ) from err


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
    syncer = Syncer(store, chunker or Chunker(), tags, importance)
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
    syncer = Syncer(store, chunker or Chunker(), tags, importance)
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
    syncer = Syncer(store, Chunker(), (), 0.5)
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
